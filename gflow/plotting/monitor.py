"""The figure of a monitor directory: probe loss and every head's attention entropy
over the clock, with the detected events marked (``gflow report DIR`` draws it)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from gflow.monitor.logs import load_monitor
from gflow.plotting.figure import plt, save_figure
from gflow.plotting.stages import STAGE_COLOURS, stage_legend

_CYCLE_STYLES = ("-", "--", ":", "-.")


def _mark(ax, events) -> None:
    """A vertical line per event at its report time, a dotted span from its onset."""
    for e in events:
        colour = STAGE_COLOURS[e.stage]
        style = _CYCLE_STYLES[(e.cycle - 1) % len(_CYCLE_STYLES)]
        ax.axvline(e.t_start, color=colour, ls=style, lw=1.2)
        if np.isfinite(e.onset) and e.onset < e.t_start:
            ax.axvspan(e.onset, e.t_start, color=colour, alpha=0.08, lw=0)


def plot_monitor(
    run_dir: str | os.PathLike, path: str | os.PathLike | None = None
) -> Path:
    """Draw ``monitor.png`` (or ``path``) for a monitor directory; return its path.

    Top: the probe loss with the global events (condensation, the embedding's
    asymmetry lifting). Below, one panel per layer (rows) and head (columns): the
    head's last-position attention entropy (black) and its tracked queries' mean
    attention on the most frequent token (green, right axis), with the head's own
    events and the global ones: a line at the time each was reported (solid for
    cycle 1, dashed for cycle 2, ...), shaded back to its onset.
    """
    run_dir = Path(run_dir)
    traj, events, cfg = load_monitor(run_dir)
    t, m = np.asarray(traj.t, float), traj.metrics
    ent = np.asarray(m["head_entropy"], float)
    n_layers, n_heads = ent.shape[1:3]
    tracked = np.asarray(m["head_tracked_on_top"], float)
    glob = [e for e in events if e.layer < 0]
    fig = plt.figure(figsize=(max(6.0, 3.2 * n_heads), 2.2 + 2.3 * n_layers))
    grid = fig.add_gridspec(n_layers + 1, n_heads)
    ax = fig.add_subplot(grid[0, :])
    ax.plot(t, m["loss"], color="k", lw=1.2)
    ax.set_ylabel("probe loss")
    _mark(ax, glob)
    ax.set_title("probe loss; events of all heads", fontsize=9)
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = fig.add_subplot(grid[layer + 1, head], sharex=fig.axes[0])
            ax.plot(t, ent[:, layer, head], color="k", lw=1.2)
            if tracked.shape[-1]:
                twin = ax.twinx()
                twin.plot(
                    t, tracked[:, layer, head].mean(-1), color="tab:green", lw=0.8
                )
                twin.set_ylim(0, 1)
                if head == n_heads - 1:
                    twin.set_ylabel("tracked on top", color="tab:green", fontsize=8)
            mine = [e for e in events if (e.layer, e.head) == (layer, head)]
            _mark(ax, mine + glob)
            ax.set_title(f"layer {layer}, head {head}", fontsize=9)
            if head == 0:
                ax.set_ylabel("entropy (nats)")
            if layer == n_layers - 1:
                ax.set_xlabel("clock t")
    stage_legend(fig, {e.stage for e in events}, lines=True)
    fig.suptitle(
        f"gflow monitor: {run_dir.name} (every {cfg['every']} steps, "
        f"{len(events)} events)"
    )
    out = Path(path) if path is not None else run_dir / "monitor.png"
    save_figure(fig, out)
    return out
