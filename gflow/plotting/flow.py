"""The figure of a flow run: loss, attention entropy and singular values over time."""

from __future__ import annotations

import numpy as np

from gflow.dynamics.trajectory import Trajectory
from gflow.plotting.figure import plt, save_figure


def plot_flow(
    traj: Trajectory,
    path,
    *,
    unigram_loss: float | None = None,
    bayes_loss: float | None = None,
    title: str = "gradient flow",
) -> None:
    """Loss, attention entropy / attention on the top token, and singular values of W_E.

    Args:
        traj: a run with ``attention_entropy``, ``attention_on_top`` and ``sv_W_E``
            metrics (those of ``MarkovObservables``); missing panels are skipped.
        path: PNG file to write.
        unigram_loss, bayes_loss: reference lines H(π) and the Bayes optimum.
    """
    t, m = traj.t, traj.metrics
    fig, axes = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    ax = axes[0]
    ax.plot(t, m["loss"], color="k", label="loss")
    if unigram_loss is not None:
        ax.axhline(unigram_loss, ls="--", color="tab:orange", label="H(π) (unigram)")
    if bayes_loss is not None:
        ax.axhline(bayes_loss, ls=":", color="tab:green", label="Bayes optimum")
    ax.set_ylabel("loss (nats)")
    ax.legend(loc="upper right")
    ax.set_title(f"{title} — status: {traj.status}")

    ax = axes[1]
    if "attention_entropy" in m:
        ax.plot(
            t, m["attention_entropy"], color="tab:purple", label="π-weighted entropy"
        )
    if "attention_on_top" in m:
        on_top = np.asarray(m["attention_on_top"])
        for i in range(on_top.shape[1]):
            ax.plot(t, on_top[:, i], lw=1, label=f"query {i}: attention on top token")
    ax.set_ylabel("attention")
    ax.legend(loc="best", fontsize=8)

    ax = axes[2]
    if "sv_W_E" in m:
        sv = np.asarray(m["sv_W_E"])
        for i in range(min(sv.shape[1], 4)):
            ax.semilogy(t, sv[:, i], label=f"σ{i + 1}(W_E)")
        ax.legend(loc="best", fontsize=8)
    ax.set_ylabel("singular value")
    ax.set_xlabel("flow time t")
    fig.tight_layout()
    save_figure(fig, path)
