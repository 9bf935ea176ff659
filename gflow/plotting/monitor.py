"""The figure of a monitor directory: probe loss and every head's attention entropy
over the clock, with the detected events marked (``gflow report DIR`` draws it)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from gflow.monitor.logs import load_monitor
from gflow.plotting.figure import plt, save_figure
from gflow.plotting.stages import stage_legend
from gflow.plotting.style import (
    DOC_WIDTH,
    STEP_CLOCK,
    settings_line,
    stage_lanes,
    stage_marks,
    styled,
    time_axis,
)


def _spans(events):
    """Each event as a lane bar from its onset to the time it was reported."""
    return [
        SimpleNamespace(
            name=e.stage,
            t_start=e.onset
            if np.isfinite(e.onset) and e.onset < e.t_start
            else e.t_start,
            t_end=e.t_start,
        )
        for e in events
    ]


def _mark(ax, events) -> None:
    """Lanes above ``ax`` (onset to report, one lane per stage kind) and a thin line
    at each report time."""
    stage_lanes(ax, _spans(events))
    stage_marks(ax, events)


@styled
def plot_monitor(
    run_dir: str | os.PathLike, path: str | os.PathLike | None = None
) -> Path:
    """Draw ``monitor.png`` (or ``path``) for a monitor directory; return its path.

    Top: the probe loss with the global events (condensation, the embedding's
    asymmetry lifting). Below, one panel per layer (rows) and head (columns): the
    head's last-position attention entropy (black) and its tracked queries' mean
    attention on the most frequent token (green, right axis), with the head's own
    events and the global ones in lanes above the panel (a bar from each event's
    onset to the time it was reported) and a thin line at each report time.
    """
    run_dir = Path(run_dir)
    traj, events, cfg = load_monitor(run_dir)
    t, m = np.asarray(traj.t, float), traj.metrics
    ent = np.asarray(m["head_entropy"], float)
    n_layers, n_heads = ent.shape[1:3]
    tracked = np.asarray(m["head_tracked_on_top"], float)
    glob = [e for e in events if e.layer < 0]
    # the monitor's clock is t = Σ η when the loop passes it, else the step
    by_step = np.array_equal(t, np.asarray(m["step"], float))
    clock = "step" if by_step else STEP_CLOCK
    fig = plt.figure(figsize=(max(DOC_WIDTH, 3.4 * n_heads), 2.6 + 2.5 * n_layers))
    grid = fig.add_gridspec(n_layers + 1, n_heads)
    top = fig.add_subplot(grid[0, :])
    top.plot(t, m["loss"], color="k", lw=1.2)
    top.set_ylabel("probe loss")
    top.set_xlabel(clock)
    if time_axis(top, t) == "linear":
        top.xaxis.set_major_locator(plt.MaxNLocator(5))  # the panels share it
    _mark(top, glob)
    top.set_title("probe loss; global events", loc="left")
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = fig.add_subplot(grid[layer + 1, head], sharex=top)
            ax.plot(t, ent[:, layer, head], color="k", lw=1.2)
            if tracked.shape[-1]:
                twin = ax.twinx()
                twin.plot(
                    t, tracked[:, layer, head].mean(-1), color="tab:green", lw=0.8
                )
                twin.set_ylim(0, 1)
                twin.spines["right"].set_visible(True)  # the style hides it
                twin.set_ylabel("on top token", color="tab:green")
            mine = [e for e in events if (e.layer, e.head) == (layer, head)]
            _mark(ax, mine + glob)
            ax.set_title(f"layer {layer}, head {head}")
            ax.set_ylabel("entropy (nats)")
            ax.set_xlabel(clock)
    stage_legend(fig, {e.stage for e in events})
    fig.suptitle(f"gflow monitor: {run_dir.name} ({len(events)} events)")
    settings_line(
        fig,
        f"every {cfg['every']} steps · probe {tuple(cfg.get('probe_shape', ()))} · "
        f"window {cfg.get('window')}",
    )
    out = Path(path) if path is not None else run_dir / "monitor.png"
    save_figure(fig, out)
    return out
