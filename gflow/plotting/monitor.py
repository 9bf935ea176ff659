"""The figure of a monitor directory: the probe loss, a per-head timeline of the
detected events that names the key class each focus settled on, and every head's
attention entropy and mass on the most frequent token over the clock
(``gflow report DIR`` draws it)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from gflow.analysis.stage import STAGE_NAMES
from gflow.monitor.logs import load_monitor
from gflow.plotting.figure import plt, save_figure
from gflow.plotting.stages import stage_legend
from gflow.plotting.style import (
    DOC_WIDTH,
    STAGE_COLOURS,
    STEP_CLOCK,
    outside_legend,
    settings_line,
    styled,
    time_axis,
)

#: one colour per head, none of them a stage colour (the stages own those)
HEAD_COLOURS = (
    "black",
    "tab:orange",
    "tab:cyan",
    "tab:brown",
    "tab:olive",
    "tab:pink",
    "tab:gray",
)
#: the marker of a focus event by the key class it settled on
KEY_MARKERS = {"top token": "^", "itself": "o", "other keys": "s"}


def _spans(events):
    """Each event as a lane bar from its onset to the time it was reported."""
    return [
        SimpleNamespace(
            name=e.stage,
            t_start=e.onset
            if e.onset is not None and np.isfinite(e.onset) and e.onset < e.t_start
            else e.t_start,
            t_end=e.t_start,
        )
        for e in events
    ]


def _row_at(t, time) -> int:
    """The saved row at or just before ``time``."""
    return int(np.clip(np.searchsorted(t, time, side="right") - 1, 0, len(t) - 1))


def focus_key_class(t, metrics, event) -> str:
    """The key class a head's focus settled on: the one whose mass (for the tracked
    queries: on the most frequent token, on themselves, on every other key) rose
    most from the event's onset to its report (the saves at or before each); a
    focus found by the self rule (``signal`` "head_self") is on itself. The
    class is unknown ("") without the tracked or self signals, or when no mass
    rose (an onset in the same save as the report)."""
    if event.signal == "head_self":  # the rule of a later cycle's focus: it fired
        return "itself"  # because the mass on itself rose by its threshold
    if "head_tracked_on_top" not in metrics or "head_self" not in metrics:
        return ""
    top = np.asarray(metrics["head_tracked_on_top"], float)
    if not top.shape[-1]:
        return ""
    self_ = np.asarray(metrics["head_self"], float)
    onset = event.onset
    start = onset if onset is not None and np.isfinite(onset) else event.t_start
    gains = {}
    i0, i1 = _row_at(t, start), _row_at(t, event.t_start)
    for when, i in (("start", i0), ("end", i1)):
        on_top = top[i, event.layer, event.head].mean()
        on_self = self_[i, event.layer, event.head]
        gains[when] = (on_top, on_self, 1.0 - on_top - on_self)
    rise = np.subtract(gains["end"], gains["start"])
    if not np.any(rise > 0):  # no span between saves, or nothing rose
        return ""
    return tuple(KEY_MARKERS)[int(np.argmax(rise))]


def _timeline(ax, t, metrics, events, heads) -> set[str]:
    """One row per head (and one for the global events): each event a bar from its
    onset to its report in its stage's colour, a marker at the report, a focus's
    marker shaped by the key class it settled on. Returns the classes drawn."""
    rows = [(-1, -1)] + heads
    offset = {n: 0.3 - 0.2 * i for i, n in enumerate(STAGE_NAMES)}
    classes = set()
    for row, (layer, head) in enumerate(rows):
        mine = [e for e in events if (e.layer, e.head) == (layer, head)]
        for e, span in zip(mine, _spans(mine)):
            y = row + offset.get(e.stage, 0.0)
            colour = STAGE_COLOURS[e.stage]
            ax.plot([span.t_start, e.t_start], [y, y], color=colour, lw=3, alpha=0.5)
            cls = focus_key_class(t, metrics, e) if e.stage == "focus" else ""
            classes.add(cls)
            ax.plot(
                [e.t_start],
                [y],
                marker=KEY_MARKERS.get(cls, "|"),
                ms=6 if cls else 9,
                mew=1.5,
                color=colour,
                ls="none",
            )
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(["global"] + [f"L{lay} H{h}" for lay, h in heads])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_ylabel("layer, head")
    ax.grid(axis="y", color="0.9", lw=0.6)
    return classes - {""}


def _per_head(ax, t, values, heads, label) -> None:
    for i, (layer, head) in enumerate(heads):
        ax.plot(
            t,
            values[:, layer, head],
            color=HEAD_COLOURS[i % len(HEAD_COLOURS)],
            ls="-" if i < len(HEAD_COLOURS) else "--",
            lw=1.0,
            label=f"L{layer} H{head}",
        )
    ax.set_ylabel(label)


@styled
def plot_monitor(
    run_dir: str | os.PathLike, path: str | os.PathLike | None = None
) -> Path:
    """Draw ``monitor.png`` (or ``path``) for a monitor directory; return its path.

    From the top: the probe loss; a timeline with one row per head and one for
    the global events (condensation, the embedding's asymmetry lifting), each
    event a bar from its onset to the time it was reported and a marker at the
    report, a focus's marker shaped by the key class its mass rose on
    (``focus_key_class``); every head's last-position attention entropy; and, when
    the monitor tracks queries, their mean mass on the most frequent token. The
    time axis is linear unless the events span decades (``time_axis``).
    """
    run_dir = Path(run_dir)
    traj, events, cfg = load_monitor(run_dir)
    t, m = np.asarray(traj.t, float), traj.metrics
    ent = np.asarray(m["head_entropy"], float)
    n_layers, n_heads = ent.shape[1:3]
    heads = [(lay, h) for lay in range(n_layers) for h in range(n_heads)]
    tracked = np.asarray(m["head_tracked_on_top"], float)
    has_tracked = tracked.ndim == 4 and tracked.shape[-1] > 0
    # the monitor's clock is t = Σ η when the loop passes it, else the step
    by_step = np.array_equal(t, np.asarray(m["step"], float))
    clock = "step" if by_step else STEP_CLOCK

    heights = [1.6, 0.9 + 0.28 * len(heads), 1.9] + ([1.9] if has_tracked else [])
    fig = plt.figure(figsize=(DOC_WIDTH, sum(heights) + 1.3))
    grid = fig.add_gridspec(len(heights), 1, height_ratios=heights)
    top = fig.add_subplot(grid[0])
    top.plot(t, m["loss"], color="k", lw=1.2)
    top.set_ylabel("probe loss")
    top.set_title("probe loss", loc="left")
    line = fig.add_subplot(grid[1], sharex=top)
    classes = _timeline(line, t, m, events, heads)
    line.set_title("events per head (bar: onset to report)", loc="left")
    if classes:
        handles = [
            plt.Line2D([], [], marker=KEY_MARKERS[c], color="tab:red", ls="none")
            for c in KEY_MARKERS
            if c in classes
        ]
        outside_legend(
            line,
            handles=handles,
            labels=[c for c in KEY_MARKERS if c in classes],
            title="focus on",
        )
    entropy = fig.add_subplot(grid[2], sharex=top)
    _per_head(entropy, t, ent, heads, "entropy (nats)")
    entropy.set_title("last-position attention entropy", loc="left")
    outside_legend(entropy, ncol=1 if len(heads) <= 8 else 2)
    panels = [top, line, entropy]
    if has_tracked:
        mass = fig.add_subplot(grid[3], sharex=top)
        _per_head(mass, t, tracked.mean(-1), heads, "mass on top token")
        mass.set_ylim(0, 1)
        mass.set_title(
            "tracked queries' attention on the most frequent token", loc="left"
        )
        panels.append(mass)
    for ax in panels[:-1]:
        ax.tick_params(labelbottom=False)
    panels[-1].set_xlabel(clock)
    # the axis follows the events (a log one only if they span decades): a warmup's
    # first saves lie decades below the rest, where nothing happens
    spans = _spans(events)
    when = np.array([x for e in spans for x in (e.t_start, e.t_end)] + [t[0], t[-1]])
    if time_axis(top, when if events else t) == "linear":
        top.xaxis.set_major_locator(plt.MaxNLocator(6))
    stage_legend(fig, {e.stage for e in events}, lines=True)
    fig.suptitle(f"gflow monitor: {run_dir.name} ({len(events)} events)")
    settings_line(
        fig,
        f"every {cfg['every']} steps · probe {tuple(cfg.get('probe_shape', ()))} · "
        f"window {cfg.get('window')}",
    )
    out = Path(path) if path is not None else run_dir / "monitor.png"
    save_figure(fig, out)
    return out
