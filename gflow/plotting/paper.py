"""The paper's figures that the stage plots do not draw (issue 13.6).

Each ``plot_*`` function takes a Markov ``Trajectory`` (parameter snapshots and/or the
``StageObservables`` metrics), an output path, and returns the path of the PNG it
wrote:

- ``plot_singular_values``: σ_k of W_P, W_Q, W_K and W_QK = W_Q W_Kᵀ over time;
- ``plot_attention_heatmaps``: the d × d population attention a_ik at the stage
  boundaries;
- ``plot_embedding_pca``: the embedding rows W_E[i] over time projected on the top
  two principal axes of all rows at all saved times;
- ``plot_row_norms``: |W_E[i]| over time, the low-frequency rows (all but argmax π)
  and their joint norm highlighted;
- ``plot_entropy_cycles``: the π-weighted attention entropy with the stages shaded
  and its significant extrema (zigzag turning points) marked.

The numbers behind the figures (``block_singular_values``, ``stage_boundaries``,
``embedding_pca``, ``row_norms``, ``entropy_extrema``) are public so that tests and
experiments can check them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gflow.analysis.stages import StageDetector, turning_points
from gflow.dynamics.trajectory import Trajectory
from gflow.plotting.figure import layout, plt, save_figure
from gflow.plotting.stages import mark_stages, stage_legend
from gflow.plotting.style import (
    DOC_WIDTH,
    PANEL_HEIGHT,
    STAGE_COLOURS,
    clock_label,
    outside_legend,
    settings_line,
    settings_text,
    styled,
    time_axis,
)

#: the blocks' names in mathtext
_BLOCK_LABELS = {
    "W_P": "$W_P$",
    "W_Q": "$W_Q$",
    "W_K": "$W_K$",
    "W_QK": r"$W_Q W_K^{\top}$",
}


def _snapshots(traj: Trajectory) -> dict[str, np.ndarray]:
    """The stacked blocks [n, ...] of the saved models (W_K None: unfactorised)."""
    if not isinstance(traj, Trajectory):
        raise TypeError(f"expected a Trajectory, got {type(traj).__name__}")
    p = traj.params
    if p is None or not hasattr(p, "W_E"):
        raise ValueError(
            "this figure needs parameter snapshots of an AttentionModel; run the flow "
            "with save_params=True (gflow flow without --no-params)"
        )
    blocks = {name: np.asarray(getattr(p, name)) for name in ("W_E", "W_P", "W_Q")}
    if blocks["W_E"].ndim != 3:
        raise ValueError("parameter snapshots need a leading time axis [n, d, m]")
    blocks["W_K"] = None if p.W_K is None else np.asarray(p.W_K)
    W_Q, W_K = blocks["W_Q"], blocks["W_K"]
    blocks["W_QK"] = W_Q if W_K is None else np.einsum("nab,ncb->nac", W_Q, W_K)
    return blocks


def _metric(traj: Trajectory, key: str) -> np.ndarray:
    if key not in traj.metrics:
        raise ValueError(
            f"this figure needs the metric {key!r}; record it with "
            "observables=StageObservables(chain) (as gflow flow does)"
        )
    return np.asarray(traj.metrics[key], float)


def _pi(pi, d: int) -> np.ndarray:
    pi = np.asarray(pi, float)
    if pi.shape != (d,) or np.any(pi < 0) or not np.isclose(pi.sum(), 1.0):
        raise ValueError(f"pi must be a probability vector of length d = {d}")
    return pi


def block_singular_values(traj: Trajectory) -> dict[str, np.ndarray]:
    """Singular values [n, k] of W_P, W_Q, W_K (when factorised) and W_QK at the
    saved times, decreasing along k."""
    blocks = _snapshots(traj)
    return {
        name: np.linalg.svd(blocks[name], compute_uv=False)
        for name in ("W_P", "W_Q", "W_K", "W_QK")
        if blocks[name] is not None
    }


@styled
def plot_singular_values(
    traj: Trajectory, path, *, stages=(), k: int = 4, title: str = "singular values"
) -> Path:
    """σ_1..σ_k of W_P, W_Q, W_K and W_QK over time, one log-scale panel per block."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    svs = block_singular_values(traj)
    fig, axes = plt.subplots(
        len(svs), 1, figsize=(DOC_WIDTH, PANEL_HEIGHT * len(svs) + 1.0), sharex=True
    )
    axes = np.atleast_1d(axes)
    for ax, (name, sv) in zip(axes, svs.items()):
        for j in range(min(k, sv.shape[1])):
            ax.semilogy(
                traj.t, np.maximum(sv[:, j], 1e-300), label=rf"$\sigma_{{{j + 1}}}$"
            )
        ax.set_ylabel(f"{_BLOCK_LABELS[name]}\nsingular values")
    outside_legend(axes[0])  # the same σ_k colours in every panel
    axes[0].set_title(title, loc="left")
    time_axis(axes[-1], traj.t, label=clock_label(traj.info))
    mark_stages(axes, stages)
    stage_legend(fig, [s.name for s in stages])  # save_figure leaves room for it
    settings_line(fig, settings_text(traj.info))
    save_figure(fig, path)
    return Path(path)


def stage_boundaries(traj: Trajectory, stages) -> list[tuple[str, int]]:
    """(label, saved index) of the first time, each stage's start and the last time,
    at the saved time nearest to each, without repeated indices."""
    t = np.asarray(traj.t, float)
    marks = [("t0", float(t[0]))]
    marks += [(f"{s.name.replace('_', ' ')} {s.cycle}", s.t_start) for s in stages]
    marks.append(("end", float(t[-1])))
    out, seen = [], set()
    for label, time in marks:
        i = int(np.argmin(np.abs(t - time)))
        if i not in seen:
            seen.add(i)
            out.append((label, i))
    return out


@styled
def plot_attention_heatmaps(
    traj: Trajectory, stages, path, *, title: str = "attention $a_{ik}$"
) -> Path:
    """Heat maps of the population attention (query i: row, key k: column) at the
    boundaries of ``stage_boundaries``; each row sums to 1."""
    attn = _metric(traj, "attention")  # [n, d, d]
    if attn.ndim != 3 or attn.shape[1] != attn.shape[2]:
        raise ValueError(f"attention must have shape [n, d, d], got {attn.shape}")
    marks = stage_boundaries(traj, stages)
    cols = min(len(marks), 4)
    rows = -(-len(marks) // cols)
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(min(DOC_WIDTH, 2.0 * cols + 1.0), 2.0 * rows + 0.9),
        sharex=True,
        sharey=True,
        squeeze=False,
    )
    axes = axes.ravel()
    d = attn.shape[1]
    for ax, (label, i) in zip(axes, marks):
        im = ax.imshow(attn[i], vmin=0.0, vmax=1.0, cmap="viridis")
        for q in range(d if d <= 8 else 0):  # numbers only where they are legible
            for key in range(d):
                v = attn[i, q, key]
                colour = "k" if v > 0.6 else "w"
                ax.text(
                    key,
                    q,
                    f"{v:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color=colour,
                )
        ax.set_title(f"{label}\nt = {traj.t[i]:.3g}", fontsize=8)
        ax.set_xticks(range(d))
        ax.set_yticks(range(d))
        ax.set_xlabel("key token $k$")
    for ax in axes[::cols]:
        ax.set_ylabel("query token $i$")
    for ax in axes[len(marks) :]:
        ax.axis("off")
    fig.suptitle(title)
    settings_line(fig, settings_text(traj.info))
    layout(fig)  # before the colorbar, which takes its room from the panels
    fig.colorbar(im, ax=list(axes[: len(marks)]), shrink=0.6, label="$a_{ik}$")
    save_figure(fig, path)
    return Path(path)


def embedding_pca(traj: Trajectory, k: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """The embedding rows' trajectories on the top ``k`` principal axes.

    All rows W_E[i] at all saved times are stacked ([n·d, m]) and centred; returns
    the coordinates [n, d, k] and each axis's fraction of the variance [k] (their
    sum is at most 1).
    """
    W_E = _snapshots(traj)["W_E"]  # [n, d, m]
    n, d, m = W_E.shape
    if not 1 <= k <= min(n * d, m):
        raise ValueError(f"k must lie in [1, {min(n * d, m)}], got {k}")
    X = W_E.reshape(n * d, m)
    X = X - X.mean(axis=0)
    _, S, Vt = np.linalg.svd(X, full_matrices=False)
    total = float(np.sum(S**2))
    ratio = S[:k] ** 2 / total if total > 0 else np.zeros(k)
    return (X @ Vt[:k].T).reshape(n, d, k), ratio


@styled
def plot_embedding_pca(
    traj: Trajectory, path, *, stages=(), title: str = "embedding rows, PCA"
) -> Path:
    """Each token's embedding row over time in the plane of the top two principal
    axes; a circle marks t0, dots in the stage colours each stage's start, a square
    the end (the legend says which)."""
    coords, ratio = embedding_pca(traj, k=2)
    fig, ax = plt.subplots(figsize=(DOC_WIDTH, 4.6))
    t = np.asarray(traj.t, float)
    for i in range(coords.shape[1]):
        (line,) = ax.plot(coords[:, i, 0], coords[:, i, 1], lw=1.2, label=f"token {i}")
        ax.plot(*coords[0, i], "o", ms=5, mfc="none", color=line.get_color())
        ax.plot(*coords[-1, i], "s", ms=5, color=line.get_color())
        for s in stages:
            j = int(np.argmin(np.abs(t - s.t_start)))
            ax.plot(*coords[j, i], "o", ms=4, color=STAGE_COLOURS[s.name])
    handles, labels = ax.get_legend_handles_labels()
    handles += [
        plt.Line2D([], [], ls="none", marker="o", mfc="none", color="k"),
        plt.Line2D([], [], ls="none", marker="s", color="k"),
    ]
    labels += [f"t0 = {t[0]:g}", f"end, t = {t[-1]:.3g}"]
    for name in dict.fromkeys(s.name for s in stages):
        handles.append(
            plt.Line2D([], [], ls="none", marker="o", color=STAGE_COLOURS[name])
        )
        labels.append(f"{name.replace('_', ' ')} starts")
    ax.set_xlabel(f"PC1 ({100 * ratio[0]:.1f}% of variance)")
    ax.set_ylabel(f"PC2 ({100 * ratio[1]:.1f}%)")
    ax.set_title(title, loc="left")
    outside_legend(ax, handles=handles, labels=labels)
    settings_line(fig, settings_text(traj.info))
    save_figure(fig, path)
    return Path(path)


def row_norms(traj: Trajectory) -> np.ndarray:
    """|W_E[i]| [n, d]: every token's embedding norm at the saved times."""
    return np.linalg.norm(_snapshots(traj)["W_E"], axis=-1)


@styled
def plot_row_norms(
    traj: Trajectory, path, *, pi, stages=(), title: str = "embedding row norms"
) -> Path:
    """|W_E[i]| of every token over time (log scale), the low-frequency rows (all but
    argmax π) solid and their joint norm |W_E[low]| in black."""
    norms = row_norms(traj)
    pi = _pi(pi, norms.shape[1])
    top = int(np.argmax(pi))
    fig, ax = plt.subplots(figsize=(DOC_WIDTH, 3.6))
    for i in range(norms.shape[1]):
        ax.semilogy(
            traj.t,
            norms[:, i],
            ls=":" if i == top else "-",
            label=rf"token {i} ($\pi_{{{i}}}$ = {pi[i]:.2g})",
        )
    low = np.sqrt(np.sum(np.delete(norms, top, axis=1) ** 2, axis=1))
    ax.semilogy(traj.t, low, color="k", lw=2, label="low-frequency rows, joint")
    time_axis(ax, traj.t, label=clock_label(traj.info))
    mark_stages(ax, stages)
    ax.set_ylabel(r"$\|W_E[i]\|$")
    ax.set_title(title, loc="left")
    outside_legend(ax)
    stage_legend(fig, [s.name for s in stages])
    settings_line(fig, settings_text(traj.info, π=np.round(pi, 3).tolist()))
    save_figure(fig, path)
    return Path(path)


def entropy_extrema(
    t, entropy, *, detector: StageDetector | None = None
) -> list[tuple[float, float, str]]:
    """The significant extrema of the attention entropy: (t, value, "min" | "max").

    They are the inner turning points of the detector's zigzag (threshold
    max(``min_move`` × range, ``min_amplitude``)), the rule the stage moves use.
    """
    detector = StageDetector() if detector is None else detector
    x = np.asarray(entropy, float)
    t = np.asarray(t, float)
    if x.ndim != 1 or x.shape != t.shape:
        raise ValueError(
            f"t and entropy must be 1-D of the same length, got {t.shape}, {x.shape}"
        )
    if x.size < 3 or not np.all(np.isfinite(x)):
        return []
    thr = max(detector.min_move * float(np.ptp(x)), detector.min_amplitude)
    pts = turning_points(x, thr)
    return [
        (float(t[b]), float(x[b]), "min" if x[b] < x[a] else "max")
        for a, b in zip(pts[:-2], pts[1:-1])
    ]


@styled
def plot_entropy_cycles(
    traj: Trajectory, stages, path, *, title: str = "attention entropy"
) -> Path:
    """The π-weighted attention entropy over every cycle, the stages in lanes above
    it (named in the stage legend), its significant extrema marked with their
    values (the legend says which marker is which)."""
    ent = _metric(traj, "attention_entropy")
    fig, ax = plt.subplots(figsize=(DOC_WIDTH, 3.6))
    ax.plot(traj.t, ent, color="k", label="entropy")
    extrema = entropy_extrema(traj.t, ent)
    for kind, marker, name in (("min", "v", "minimum"), ("max", "^", "maximum")):
        points = [(time, value) for time, value, k in extrema if k == kind]
        if points:
            ax.plot(
                *zip(*points),
                marker,
                ls="none",
                color="0.35",
                label=f"{name} (value in nats)",
            )
    for time, value, kind in extrema:
        ax.annotate(
            f"{value:.3f}",
            (time, value),
            textcoords="offset points",
            xytext=(4, -12 if kind == "min" else 6),
            fontsize=7,
        )
    ax.margins(y=0.2)  # room inside the data area for the values of the extrema
    time_axis(ax, traj.t, label=clock_label(traj.info))
    mark_stages(ax, stages)
    ax.set_ylabel(r"$\sum_i \pi_i H(a_{i\cdot})$ (nats)")
    ax.set_title(title, loc="left")
    outside_legend(ax)
    stage_legend(fig, [s.name for s in stages])  # save_figure leaves room for it
    settings_line(fig, settings_text(traj.info))
    save_figure(fig, path)
    return Path(path)


def paper_figures(run_dir, traj: Trajectory, stages, *, pi, prefix: str = "paper_"):
    """Every figure of this module into ``run_dir`` as ``<prefix><name>.png``.

    The parameter figures are skipped without finite parameter snapshots (a run with
    --no-params, or one that diverged), the PCA also when m = 1. Returns the paths.
    """
    run_dir = Path(run_dir)
    out = [
        plot_entropy_cycles(traj, stages, run_dir / f"{prefix}entropy.png"),
        plot_attention_heatmaps(traj, stages, run_dir / f"{prefix}attention.png"),
    ]
    p = traj.params
    if p is None or not all(
        np.all(np.isfinite(np.asarray(getattr(p, name))))
        for name in ("W_E", "W_P", "W_Q")
    ):
        return out
    out.append(
        plot_singular_values(
            traj, run_dir / f"{prefix}singular_values.png", stages=stages
        )
    )
    if np.shape(p.W_E)[-1] >= 2:
        out.append(
            plot_embedding_pca(traj, run_dir / f"{prefix}pca.png", stages=stages)
        )
    out.append(
        plot_row_norms(traj, run_dir / f"{prefix}row_norms.png", pi=pi, stages=stages)
    )
    return out
