"""Figure of a run with its detected stages marked (``gflow flow`` → stages.png)."""

from __future__ import annotations

import numpy as np

from gflow.analysis.stages import STAGE_NAMES
from gflow.plotting.figure import plt, save_figure
from gflow.plotting.style import (
    DOC_WIDTH,
    PANEL_HEIGHT,
    STAGE_COLOURS,
    clock_label,
    outside_legend,
    settings_line,
    settings_text,
    stage_lanes,
    stage_marks,
    styled,
    time_axis,
)


def stage_legend(fig, names, *, lines: bool = False) -> None:
    """One legend entry per stage name present (in cycle order) below the figure:
    patches in the lanes' colours, or lines (``lines=True``) for events drawn as
    lines. ``save_figure`` keeps room for it (above the settings line)."""
    names = [n for n in STAGE_NAMES if n in set(names)]
    if not names:
        return
    if lines:
        handles = [plt.Line2D([], [], color=STAGE_COLOURS[n]) for n in names]
    else:
        handles = [
            plt.Rectangle((0, 0), 1, 1, color=STAGE_COLOURS[n], alpha=0.75)
            for n in names
        ]
    fig.legend(
        handles,
        [n.replace("_", " ") for n in names],
        loc="lower center",
        ncol=len(names),
        fontsize=8,
        frameon=False,
        bbox_to_anchor=(0.5, 0.0),
    )


def mark_stages(axes, stages) -> None:
    """The stages on a column of panels sharing x: one lane per stage kind above
    the top panel, a thin line at each stage's start on every panel."""
    axes = list(np.atleast_1d(axes))
    if not stages:
        return
    stage_lanes(axes[0], stages)
    for ax in axes:
        stage_marks(ax, stages)


@styled
def plot_stages(
    traj,
    stages,
    path,
    *,
    unigram_loss: float | None = None,
    bayes_loss: float | None = None,
    title: str = "stages",
) -> None:
    """Loss, attention entropy, singular values of W_E and attention on the top token.

    Args:
        traj: a run with ``StageObservables`` metrics.
        stages: the list ``detect_stages`` returned.
        path: PNG file to write.
        unigram_loss, bayes_loss: reference lines H(π) and the Bayes optimum.
    """
    t, m = traj.t, traj.metrics
    fig, axes = plt.subplots(
        4, 1, figsize=(DOC_WIDTH, 4 * PANEL_HEIGHT + 1.0), sharex=True
    )
    ax = axes[0]
    ax.plot(t, m["loss"], color="k", label="loss")
    if unigram_loss is not None:
        ax.axhline(unigram_loss, ls="--", color="tab:orange", label=r"$H(\pi)$")
    if bayes_loss is not None:
        ax.axhline(bayes_loss, ls=":", color="tab:green", label="Bayes optimum")
    ax.set_ylabel("loss (nats)")
    outside_legend(ax)
    ax.set_title(title, loc="left")
    axes[1].plot(t, m["attention_entropy"], color="k")
    axes[1].set_ylabel("attention entropy\n" + r"$\sum_i \pi_i H(a_{i\cdot})$ (nats)")
    sv = np.asarray(m["sv_W_E"])
    for i in range(min(sv.shape[1], 4)):
        axes[2].semilogy(t, sv[:, i], label=rf"$\sigma_{i + 1}(W_E)$")
    axes[2].set_ylabel("singular value")
    outside_legend(axes[2])
    on_top = np.asarray(m["attention_on_top"])
    for i in range(on_top.shape[1]):
        axes[3].plot(t, on_top[:, i], label=f"query {i}")
    axes[3].set_ylabel("attention on the\nmost frequent token")
    outside_legend(axes[3])
    time_axis(axes[3], t, label=clock_label(traj.info))
    mark_stages(axes, stages)
    stage_legend(fig, [s.name for s in stages])
    settings_line(fig, settings_text(traj.info))
    save_figure(fig, path)
