"""Figures of text runs (``gflow text``): where the tracked rows' attention goes,
and summaries.

Reads the files ``gflow.runs.text.write_text_run`` saved; imports matplotlib
through ``gflow.plotting.figure``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gflow.plotting.figure import layout, plt, save_figure
from gflow.plotting.style import (
    DOC_WIDTH,
    clock_label,
    outside_legend,
    settings_line,
    styled,
    time_axis,
)
from gflow.runs.files import read_json

#: the configuration fields a text figure's settings line names, if present
_SETTINGS_KEYS = ("corpus", "tokenizer", "vocab_size", "d_model", "seq_len", "seed")


def _settings(run_dir: Path) -> str:
    path = run_dir / "config.json"
    cfg = read_json(path) if path.is_file() else {}
    return " · ".join(f"{k} = {cfg[k]}" for k in _SETTINGS_KEYS if k in cfg)


def _info(run_dir: Path, name: str) -> dict:
    path = run_dir / f"{name}.json"
    return read_json(path).get("info", {}) if path.is_file() else {}


def _label(tok: str) -> str:
    return tok if len(tok) <= 12 else tok[:11] + "…"


#: a row none of whose entries moves by this much from its first save is still
STILL = 0.05


def _top_index(run_dir: Path, vocab: list[str]) -> int:
    """The most frequent type: the config's ``top`` if it names one, else id 0."""
    path = run_dir / "config.json"
    top = (read_json(path) if path.is_file() else {}).get("top") or []
    return vocab.index(top[0]) if top and top[0] in vocab else 0


def row_masses(R, q: int, top: int, *, others: int = 2) -> dict[str, np.ndarray]:
    """The attention row ``R`` [n_t, d] of query ``q`` as a few masses over time:
    on the top type, on the query itself (if it is not the top type), on each of
    the ``others`` key types that reach the largest mass, and on the rest (every
    other key; the masses sum to the row's total). Keys are the type ids; the
    names are ``"top"``, ``"self"``, the ids of the others, and ``"rest"``."""
    R = np.asarray(R, float)
    named = {"top": top}
    if q != top:
        named["self"] = q
    peak = R.max(axis=0)
    peak[[top, q]] = -np.inf
    for k in np.argsort(-peak, kind="stable")[: max(0, min(others, R.shape[1] - 2))]:
        if np.isfinite(peak[k]):
            named[int(k)] = int(k)
    out = {name: R[:, k] for name, k in named.items()}
    out["rest"] = R.sum(axis=1) - sum(out.values())
    return out


@styled
def plot_attention_rows(run_dir, name: str, *, others: int = 2) -> Path:
    """One panel per tracked query that moves: the mass its attention row puts on
    the most frequent type, on itself, on the ``others`` key types that reach the
    largest mass (named) and on all the rest, over the clock (a log axis when the
    run spans decades: the rows move early). Rows none of whose entries moves by
    ``STILL`` are named in the title instead of drawn (all are drawn if none moves).
    """
    run_dir = Path(run_dir)
    vocab = [r["token"] for r in read_json(run_dir / "vocab.json")]
    with np.load(run_dir / f"{name}_rows.npz") as f:
        t, rows, queries = f["t"], f["rows"], f["queries"]
    top = _top_index(run_dir, vocab)
    moved = [
        j
        for j in range(len(queries))
        if np.max(np.abs(rows[:, j, :] - rows[:1, j, :]), initial=0.0) >= STILL
    ]
    still = [j for j in range(len(queries)) if j not in moved]
    drawn = moved or list(range(len(queries)))
    n = max(len(drawn), 1)
    fig, axes = plt.subplots(
        n, 1, figsize=(DOC_WIDTH, 1.75 * n + 0.9), sharex=True, squeeze=False
    )
    if not len(queries):  # no query ends enough windows: say so instead of failing
        axes[0, 0].text(0.5, 0.5, "no tracked queries (use --track)", ha="center")
    colours = {"top": "tab:blue", "self": "tab:red", "rest": "0.55"}
    others_colours = ["tab:orange", "tab:brown", "tab:olive", "tab:cyan"]
    for ax, j in zip(axes[:, 0], drawn):
        q = int(queries[j])
        masses = row_masses(rows[:, j, :], q, top, others=others)
        for i, (key, mass) in enumerate(masses.items()):
            if key == "top":
                label = f"on {_label(vocab[top])!r}"
            elif key == "self":
                label = "on itself"
            elif key == "rest":
                label = "on every other key"
            else:
                label = f"on {_label(vocab[key])!r}"
            colour = colours.get(key, others_colours[(i - 2) % len(others_colours)])
            ax.plot(
                t,
                mass,
                color=colour,
                lw=1.3,
                ls=":" if key == "rest" else "-",
                label=label,
            )
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("attention mass")
        ax.set_title(f"query {_label(vocab[q])!r}", loc="left")
        outside_legend(ax)
    time_axis(axes[-1, 0], t, label=clock_label(_info(run_dir, name)))
    title = f"{name}: where each tracked query's attention goes"
    if moved and still:
        names = ", ".join(repr(_label(vocab[int(queries[j])])) for j in still)
        title += f"\n(not drawn: no entry moves by {STILL:g}: {names})"
    fig.suptitle(title, x=0.01, ha="left")
    settings_line(fig, _settings(run_dir))
    layout(fig)
    path = run_dir / f"attention_rows_{name}.png"
    save_figure(fig, path)
    return path


def _metrics(run_dir: Path, name: str):
    """(t, metrics, status) of a saved run: the arrays only, no model rebuilt (what
    ``load_trajectory`` would add costs JAX compilations)."""
    with np.load(run_dir / f"{name}_metrics.npz") as f:
        m = {k: f[k] for k in f.files}
    return m.pop("t"), m, read_json(run_dir / f"{name}.json")["status"]


@styled
def plot_text_summary(run_dir, names) -> Path:
    """Loss, each query's attention entropy, mass on the top type and on itself, and
    σ(W_E), one column per run, all on one time axis."""
    run_dir = Path(run_dir)
    cfg = read_json(run_dir / "config.json")
    qnames = list(cfg["queries"])
    top = cfg["top"][0]
    fig, axes = plt.subplots(
        4,
        len(names),
        figsize=(max(DOC_WIDTH, 4.6 * len(names)), 9.5),
        sharex=True,  # one time range for every run: a log axis where it spans
        squeeze=False,  # decades, so that runs on different clocks read side by side
    )
    times = []
    for c, name in enumerate(names):
        t, m, status = _metrics(run_dir, name)
        times.append(t)
        ax = axes[0, c]
        ax.plot(t, m["loss"], color="k")
        ax.set_title(f"{name} — {status}", loc="left")
        ax.set_ylabel("loss (nats)")
        for row, key, ylabel in (
            (1, "query_entropy", r"attention entropy $H(A_q)$"),
            (2, "query_on_top1", f"mass on {top!r} (solid)\n/ on itself (dashed)"),
        ):
            ax = axes[row, c]
            for j, q in enumerate(qnames):
                line = ax.plot(t, m[key][:, j], lw=1.2, label=repr(q))
                if row == 2:
                    ax.plot(
                        t,
                        m["query_on_self"][:, j],
                        lw=1,
                        ls="--",
                        color=line[0].get_color(),
                    )
            if row == 1:
                ax.plot(
                    t,
                    m["attention_entropy"],
                    color="k",
                    lw=1,
                    ls=":",
                    label="all windows",
                )
            ax.set_ylabel(ylabel)
            if ax.get_legend_handles_labels()[0]:
                outside_legend(ax)
        ax = axes[3, c]
        sv = m["sv_W_E"]
        for i in range(sv.shape[1]):
            ax.semilogy(t, sv[:, i], label=rf"$\sigma_{{{i + 1}}}(W_E)$")
        ax.set_ylabel("singular value")
        outside_legend(ax)
        ax.set_xlabel(clock_label(_info(run_dir, name)))
    time_axis(axes[-1, 0], np.concatenate(times))
    settings_line(fig, _settings(run_dir))
    path = run_dir / "text_summary.png"
    save_figure(fig, path)
    return path
