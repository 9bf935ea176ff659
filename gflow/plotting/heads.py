"""Figures of a Transformer's heads: per-head entropy over time, attention maps."""

from __future__ import annotations

import os
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Int

from gflow.analysis.stage import Stage
from gflow.array_types import Model
from gflow.dynamics.trajectory import Trajectory
from gflow.plotting.figure import layout, plt, save_figure
from gflow.plotting.stages import stage_legend
from gflow.plotting.style import (
    DOC_WIDTH,
    clock_label,
    settings_line,
    settings_text,
    stage_lanes,
    styled,
    time_axis,
)


def _grid(n_layers: int, n_heads: int, *, width: float, height: float):
    fig, axes = plt.subplots(
        n_layers,
        n_heads,
        figsize=(max(DOC_WIDTH, width * n_heads), height * n_layers + 1.0),
        squeeze=False,
        sharex=True,
        sharey=True,
    )
    return fig, axes


@styled
def plot_head_entropy(
    traj: Trajectory,
    path: str | os.PathLike,
    *,
    stages: Sequence[Stage] | None = None,
    title: str = "",
) -> None:
    """Each head's last-position attention entropy over the run's clock.

    One panel per layer (rows) and head (columns); a head's own stages and the
    global condensation (layer = head = -1) in lanes above its panel. The x axis
    is named by the clock (``traj.info``): the flow time for a flow, t = Σ η for
    an optimizer (``gflow train``), on a log scale when the run spans decades.

    Args:
        traj: a run with the ``head_entropy`` metric [n, l, h] (``HeadObservables``).
        path: PNG file to write.
        stages: the list ``detect_head_stages`` returned, or None.
        title: figure title.
    """
    if "head_entropy" not in traj.metrics:
        raise ValueError("plot_head_entropy needs the metric 'head_entropy'")
    t = np.asarray(traj.t, float)
    ent = np.asarray(traj.metrics["head_entropy"], float)  # [n, l, h]
    n_layers, n_heads = ent.shape[1:3]
    fig, axes = _grid(n_layers, n_heads, width=3.2, height=2.4)
    time_axis(axes[0, 0], t)  # the panels share x
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = axes[layer, head]
            ax.plot(t, ent[:, layer, head], color="k", lw=1.2)
            ax.set_title(f"layer {layer}, head {head}")
            if stages:
                mine = [
                    s for s in stages if (s.layer, s.head) in ((layer, head), (-1, -1))
                ]
                stage_lanes(ax, mine)
            if head == 0:
                ax.set_ylabel("entropy (nats)")
            if layer == n_layers - 1:
                ax.set_xlabel(clock_label(traj.info))
    stage_legend(fig, {s.name for s in stages or ()})
    fig.suptitle(title or "last-position attention entropy per head")
    settings_line(fig, settings_text(traj.info))
    save_figure(fig, path)


@styled
def plot_attention_maps(
    model: Model,
    context: Int[ArrayLike, " s"],
    path: str | os.PathLike,
    *,
    title: str = "",
) -> None:
    """Heat maps of ``model.attention(context)``: one panel per layer and head,
    query positions down, key positions across, tokens on the ticks.

    Args:
        model: a model with ``attention(context)``: a Transformer's [l, h, s, s],
            the attention model's [s, s] (one layer, one head), or the positional
            model's last row [s] (one query).
        context: int [s], one context.
        path: PNG file to write.
        title: figure title.
    """
    context = np.asarray(context)
    attn = np.asarray(model.attention(jnp.asarray(context)), float)
    attn = attn.reshape((1,) * (4 - attn.ndim) + attn.shape)  # [l, h, q, s]
    n_layers, n_heads, q, s = attn.shape
    queries = context[s - q :]
    fig, axes = _grid(n_layers, n_heads, width=2.8, height=2.8)
    image = None
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = axes[layer, head]
            image = ax.imshow(
                attn[layer, head], vmin=0.0, vmax=1.0, cmap="viridis", origin="upper"
            )
            ax.set_title(f"layer {layer}, head {head}")
            if s <= 32:
                ax.set_xticks(range(s), [str(x) for x in context], fontsize=6)
                ax.set_yticks(range(q), [str(x) for x in queries], fontsize=6)
            if head == 0:
                ax.set_ylabel("query")
            if layer == n_layers - 1:
                ax.set_xlabel("key")
    fig.suptitle(title or "attention weights")
    settings_line(fig)
    layout(fig)  # before the colorbar, which takes its room from the panels
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="weight")
    save_figure(fig, path)
