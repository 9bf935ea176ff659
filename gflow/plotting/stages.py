"""Figure of a run with its detected stages shaded (``gflow flow`` → stages.png)."""

from __future__ import annotations

import numpy as np

from gflow.analysis.stages import STAGE_NAMES
from gflow.plotting.figure import plt, save_figure

#: One colour per stage name.
STAGE_COLOURS = {
    "condensation": "tab:blue",
    "focus": "tab:red",
    "dilution": "tab:green",
    "asymmetry_lifting": "tab:purple",
}


def stage_legend(fig, names, *, lines: bool = False) -> None:
    """One legend entry per stage name present (in cycle order) below the figure:
    shaded patches, or lines (``lines=True``) for events drawn as lines."""
    names = [n for n in STAGE_NAMES if n in set(names)]
    if not names:
        return
    if lines:
        handles = [plt.Line2D([], [], color=STAGE_COLOURS[n]) for n in names]
    else:
        handles = [
            plt.Rectangle((0, 0), 1, 1, color=STAGE_COLOURS[n], alpha=0.3)
            for n in names
        ]
    fig.legend(
        handles,
        [n.replace("_", " ") for n in names],
        loc="lower center",
        ncol=len(names),
        fontsize=8,
        bbox_to_anchor=(0.5, 0.0),
    )


def shade_stages(ax, stages, *, labels: bool = False) -> None:
    """Shade each stage's [t_start, t_end] on ``ax``; label cycle and name on top."""
    for s in stages:
        ax.axvspan(s.t_start, s.t_end, color=STAGE_COLOURS[s.name], alpha=0.12, lw=0)
        if labels:
            ax.text(
                s.t_start,
                1.0,
                f"{s.name.replace('_', ' ')} {s.cycle}",
                transform=ax.get_xaxis_transform(),
                rotation=90,
                va="top",
                ha="left",
                fontsize=7,
                color=STAGE_COLOURS[s.name],
            )


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
    fig, axes = plt.subplots(4, 1, figsize=(8, 11), sharex=True)
    ax = axes[0]
    ax.plot(t, m["loss"], color="k", label="loss")
    if unigram_loss is not None:
        ax.axhline(unigram_loss, ls="--", color="tab:orange", label="H(π)")
    if bayes_loss is not None:
        ax.axhline(bayes_loss, ls=":", color="tab:green", label="Bayes optimum")
    ax.set_ylabel("loss (nats)")
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title)
    axes[1].plot(t, m["attention_entropy"], color="tab:purple")
    axes[1].set_ylabel("π-weighted attention\nentropy (nats)")
    sv = np.asarray(m["sv_W_E"])
    for i in range(min(sv.shape[1], 4)):
        axes[2].semilogy(t, sv[:, i], label=f"σ{i + 1}(W_E)")
    axes[2].set_ylabel("singular value")
    axes[2].legend(loc="best", fontsize=8)
    on_top = np.asarray(m["attention_on_top"])
    for i in range(on_top.shape[1]):
        axes[3].plot(t, on_top[:, i], label=f"query {i}")
    axes[3].set_ylabel("attention on the\nmost frequent token")
    axes[3].set_xlabel("flow time t")
    axes[3].legend(loc="best", fontsize=8)
    for i, ax in enumerate(axes):
        shade_stages(ax, stages, labels=i == 0)
    fig.tight_layout()
    save_figure(fig, path)
