"""Figures of text runs (``gflow text``): attention-row heat maps and summaries.

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


@styled
def plot_attention_rows(run_dir, name: str, *, num_keys: int = 20) -> Path:
    """One heat map per tracked query: its attention row A_q over time.

    Rows of the image are key types (the ``num_keys`` most frequent, the query itself
    if it is not among them, and "rest" for all others); columns are saved times,
    on a log axis when the run spans decades (the rows move early).
    """
    run_dir = Path(run_dir)
    vocab = [r["token"] for r in read_json(run_dir / "vocab.json")]
    with np.load(run_dir / f"{name}_rows.npz") as f:
        t, rows, queries = f["t"], f["rows"], f["queries"]
    n_q = len(queries)
    fig, axes = plt.subplots(
        max(n_q, 1),
        1,
        figsize=(DOC_WIDTH, 2.8 * max(n_q, 1) + 0.6),
        sharex=True,
        squeeze=False,
    )
    if n_q == 0:  # no query ends enough windows: say so instead of failing
        axes[0, 0].text(0.5, 0.5, "no tracked queries (use --track)", ha="center")
    for ax, (j, q) in zip(axes[:, 0], enumerate(queries)):
        keys = list(range(min(num_keys, len(vocab))))
        if q not in keys:
            keys.append(int(q))
        R = rows[:, j, :]  # [n_t, d]
        rest = 1.0 - R[:, keys].sum(axis=1, keepdims=True)
        img = np.concatenate([R[:, keys], rest], axis=1).T  # [keys+1, n_t]
        # a mesh, not an image: it follows a log time axis
        im = ax.pcolormesh(
            t,
            np.arange(len(keys) + 1),
            img,
            shading="nearest",
            vmin=0,
            vmax=1,
            cmap="viridis",
        )
        ax.set_ylim(len(keys) + 0.5, -0.5)
        labels = [_label(vocab[k]) + (" (self)" if k == q else "") for k in keys]
        ax.set_yticks(range(len(keys) + 1), [*labels, "rest"], fontsize=6)
        ax.set_title(f"{name}: attention row of query {vocab[int(q)]!r}", loc="left")
        ax.set_ylabel("key type")
        fig.colorbar(im, ax=ax, fraction=0.02, pad=0.01, label="attention")
    time_axis(axes[-1, 0], t, label=clock_label(_info(run_dir, name)))
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
    σ(W_E), one column per run."""
    run_dir = Path(run_dir)
    cfg = read_json(run_dir / "config.json")
    qnames = list(cfg["queries"])
    top = cfg["top"][0]
    fig, axes = plt.subplots(
        4,
        len(names),
        figsize=(max(DOC_WIDTH, 4.6 * len(names)), 9.5),
        sharex="col",
        squeeze=False,
    )
    for c, name in enumerate(names):
        t, m, status = _metrics(run_dir, name)
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
        time_axis(ax, t, label=clock_label(_info(run_dir, name)))
    settings_line(fig, _settings(run_dir))
    path = run_dir / "text_summary.png"
    save_figure(fig, path)
    return path
