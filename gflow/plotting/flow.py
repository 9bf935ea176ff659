"""The figure of a flow run: loss, attention entropy and singular values over time."""

from __future__ import annotations

import numpy as np

from gflow.dynamics.trajectory import Trajectory
from gflow.plotting.figure import plt, save_figure
from gflow.plotting.style import (
    DOC_WIDTH,
    PANEL_HEIGHT,
    clock_label,
    outside_legend,
    settings_line,
    settings_text,
    styled,
    time_axis,
)


@styled
def plot_flow(
    traj: Trajectory,
    path,
    *,
    unigram_loss: float | None = None,
    bayes_loss: float | None = None,
    title: str = "gradient flow",
) -> None:
    """Loss, attention entropy, attention on the top token and singular values of
    W_E, one panel each.

    Args:
        traj: a run with ``attention_entropy``, ``attention_on_top`` and ``sv_W_E``
            metrics (those of ``MarkovObservables``); missing panels are skipped.
        path: PNG file to write.
        unigram_loss, bayes_loss: reference lines H(π) and the Bayes optimum.
    """
    t, m = traj.t, traj.metrics
    panels = ["loss"] + [
        k for k in ("attention_entropy", "attention_on_top", "sv_W_E") if k in m
    ]
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(DOC_WIDTH, PANEL_HEIGHT * len(panels) + 0.8),
        sharex=True,
        squeeze=False,
    )
    axes = dict(zip(panels, axes[:, 0]))
    ax = axes["loss"]
    ax.plot(t, m["loss"], color="k", label="loss")
    if unigram_loss is not None:
        ax.axhline(
            unigram_loss, ls="--", color="tab:orange", label=r"$H(\pi)$ (unigram)"
        )
    if bayes_loss is not None:
        ax.axhline(bayes_loss, ls=":", color="tab:green", label="Bayes optimum")
    ax.set_ylabel("loss (nats)")
    outside_legend(ax)
    ax.set_title(f"{title} — status: {traj.status}", loc="left")
    if "attention_entropy" in axes:
        ax = axes["attention_entropy"]
        ax.plot(t, m["attention_entropy"], color="k")
        ax.set_ylabel(r"$\sum_i \pi_i H(a_{i\cdot})$ (nats)")
    if "attention_on_top" in axes:
        ax = axes["attention_on_top"]
        on_top = np.asarray(m["attention_on_top"])
        for i in range(on_top.shape[1]):
            ax.plot(t, on_top[:, i], lw=1, label=f"query {i}")
        ax.set_ylabel("attention on\nthe top token")
        outside_legend(ax)
    if "sv_W_E" in axes:
        ax = axes["sv_W_E"]
        sv = np.asarray(m["sv_W_E"])
        for i in range(min(sv.shape[1], 4)):
            ax.semilogy(t, sv[:, i], label=rf"$\sigma_{i + 1}(W_E)$")
        ax.set_ylabel("singular value")
        outside_legend(ax)
    time_axis(axes[panels[-1]], t, label=clock_label(traj.info))
    settings_line(fig, settings_text(traj.info))
    save_figure(fig, path)
