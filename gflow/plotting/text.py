"""Figures of text runs (``gflow text``): where the tracked rows' attention goes,
and summaries.

Reads the files ``gflow.runs.text.write_text_run`` saved; imports matplotlib
through ``gflow.plotting.figure``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gflow.plotting.figure import (
    FOOTER_IN,
    LEGEND_ROOM_IN,
    layout,
    plt,
    save_figure,
)
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


#: inches: the most a figure ``DOC_WIDTH`` wide may be tall, 1200 px at the docs'
#: 770 px (issue 56 point 5)
MAX_HEIGHT = DOC_WIDTH * 1200 / 770
#: inches: a panel of the stack, and the least a panel of the grid is given while
#: ``_GRID_COLUMNS`` columns can hold them all
_PANEL, _PANEL_FLOOR = 1.75, 0.9
#: inches: the title, time axis and settings line around the panels
_FRAME = 0.9
#: the most columns of the grid (narrower panels crowd their time axis)
_GRID_COLUMNS = 3
_COLOURS = {"top": "tab:blue", "self": "tab:red", "rest": "0.55"}
_OTHERS_COLOURS = ["tab:orange", "tab:brown", "tab:olive", "tab:cyan"]


def _wrap(parts: list[str], width: float) -> str:
    """``parts`` joined by " · " into lines that fit ``width`` inches at 8 pt."""
    most = max(int(width / 0.065), 1)  # characters a line holds
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 3 + len(part) <= most:
            lines[-1] += " · " + part
        else:
            lines.append(part)
    return "\n".join(lines)


def _grid(n: int, room: float) -> tuple[int, int, float]:
    """(rows, columns, panel height) of a grid of ``n`` panels in ``room`` inches:
    the fewest columns (2 at least) that give each panel ``_PANEL_FLOOR``, at most
    ``_GRID_COLUMNS`` (then the panels are lower still)."""
    for cols in range(2, _GRID_COLUMNS + 1):
        rows = -(-n // cols)
        if rows * _PANEL_FLOOR <= room or cols == _GRID_COLUMNS:
            return rows, cols, min(_PANEL, room / rows)
    raise AssertionError  # the loop returns


@styled
def plot_attention_rows(run_dir, name: str, *, others: int = 2) -> Path:
    """One panel per tracked query that moves: the mass its attention row puts on
    the most frequent type, on itself, on the ``others`` key types that reach the
    largest mass (named) and on all the rest, over the clock (a log axis when the
    run spans decades: the rows move early). Rows none of whose entries moves by
    ``STILL`` are named in the title instead of drawn (all are drawn if none moves).

    The figure is never taller than ``MAX_HEIGHT``: the panels are a stack, each
    with its legend, while they fit; more wrap into a grid of 2 or 3 columns with
    one legend below, each panel's title naming the query and its other keys.
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
    stack = _PANEL * n + _FRAME <= MAX_HEIGHT
    if stack:
        nrows, ncols, panel, legend_rows = n, 1, _PANEL, 0
    else:
        entries = 3 + max(others, 0)  # top, self, the others, the rest
        legend_rows = 1 if entries <= 5 else 2
        frame = _FRAME + LEGEND_ROOM_IN * legend_rows
        nrows, ncols, panel = _grid(n, MAX_HEIGHT - frame)
    height = panel * nrows + _FRAME + LEGEND_ROOM_IN * legend_rows
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(DOC_WIDTH, height),
        sharex=True,
        sharey=True,
        squeeze=False,
    )
    cells = list(axes.flat)
    if not len(queries):  # no query ends enough windows: say so instead of failing
        cells[0].text(0.5, 0.5, "no tracked queries (use --track)", ha="center")
    handles = {}
    for ax, j in zip(cells, drawn):
        q = int(queries[j])
        masses = row_masses(rows[:, j, :], q, top, others=others)
        named = []  # the other keys, in the grid's title
        for i, (key, mass) in enumerate(masses.items()):
            if key == "top":
                label = f"on {_label(vocab[top])!r}"
            elif key == "self":
                label = "on itself"
            elif key == "rest":
                label = "on every other key"
            elif stack:
                label = f"on {_label(vocab[key])!r}"
            else:
                named.append(_label(vocab[key]))
                label = f"on other key {len(named)}"
            if key in _COLOURS:
                colour = _COLOURS[key]
            elif stack:
                colour = _OTHERS_COLOURS[(i - 2) % len(_OTHERS_COLOURS)]
            else:
                colour = _OTHERS_COLOURS[(len(named) - 1) % len(_OTHERS_COLOURS)]
            (line,) = ax.plot(
                t,
                mass,
                color=colour,
                lw=1.3,
                ls=":" if key == "rest" else "-",
                label=label,
            )
            rank = {"top": 0, "self": 1, "rest": 99}.get(key, 1 + len(named))
            handles.setdefault(label, (rank, line))
        ax.set_ylim(-0.02, 1.02)
        if stack:
            ax.set_ylabel("attention mass")
            ax.set_title(f"query {_label(vocab[q])!r}", loc="left")
            outside_legend(ax)
            continue
        ax.set_yticks([0.0, 0.5, 1.0])
        parts = [repr(_label(vocab[q]))]
        parts += [f"{k} {w!r}" for k, w in enumerate(named, 1)]
        ax.set_title(_wrap(parts, DOC_WIDTH / ncols - 0.5), loc="left", fontsize=8)
    for ax in cells[len(drawn) or 1 :]:  # the grid's empty cells
        ax.set_visible(False)
    label = clock_label(_info(run_dir, name))
    for c in range(ncols):  # the bottom panel of each column: ticks and label
        col = [ax for ax in axes[:, c] if ax.get_visible()]
        if col:  # the scale is shared by every panel
            time_axis(col[-1], t, label=label)
            col[-1].xaxis.set_tick_params(labelbottom=True)
    if not stack:  # one label for the grid: the panels share y
        axes[(nrows - 1) // 2, 0].set_ylabel("attention mass")
    title = f"{name}: where each tracked query's attention goes"
    if not stack:
        title += "\n(each panel: the query · its other keys 1, 2, … by largest mass)"
    if moved and still:
        names = ", ".join(repr(_label(vocab[int(queries[j])])) for j in still)
        title += f"\n(not drawn: no entry moves by {STILL:g}: {names})"
    fig.suptitle(title, x=0.01, ha="left")
    settings_line(fig, _settings(run_dir))
    if not stack and handles:
        order = sorted(handles, key=lambda k: handles[k][0])
        fig.legend(
            [handles[k][1] for k in order],
            order,
            loc="lower center",
            ncol=-(-len(handles) // legend_rows),
            frameon=False,
        )
    _layout(fig, legend_rows)
    path = run_dir / f"attention_rows_{name}.png"
    save_figure(fig, path)
    return path


def _layout(fig, legend_rows: int) -> None:
    """``layout`` with room for a figure legend of ``legend_rows`` rows."""
    if legend_rows <= 1:
        layout(fig)
        return
    height = fig.get_figheight()
    for legend in fig.legends:
        legend.set_bbox_to_anchor((0.5, FOOTER_IN / height))
    reserve = FOOTER_IN + LEGEND_ROOM_IN * legend_rows
    fig.tight_layout(rect=(0.0, reserve / height, 1.0, 1.0))


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
