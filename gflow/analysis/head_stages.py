"""Per-head stage detection for the deep Transformer (issue 14).

``detect_head_stages(trajectory)`` applies the stage rules of docs/markov_cycle.md
(``gflow.analysis.stages``) to every attention head separately, on the signals that
``HeadObservables`` records (each with a leading time axis: ``head_entropy``
[n, l, h], ``head_on_top`` [n, l, h], ``head_tracked_on_top`` [n, l, h, q],
``head_self`` [n, l, h], ``sv_W_A`` [n, l, h, k]). Moves and growths are those of
``StageDetector`` (``moves``, ``growth``) with its thresholds.

Condensation is global: it is reported once, with ``layer = head = -1``, and it opens
the window of every head's focus. It runs from the first saved time to

- the time ``unigram_gap`` (L - H(π)) has fallen to ``edge`` (5%) of its initial
  value, when the trajectory records it (as ``detect_stages``);
- otherwise the end of the first plateau-bound fall of the loss: the end (95%) of the
  first fall of the loss rate -dL/dt (central differences; |∇L|² for a gradient
  flow), normalised by its peak. This stops at the first plateau even when later
  stages take the loss far below it, which the total drop of the loss would not.

No condensation (a loss that never falls) opens the windows at the first saved time.

Cycle 1, per head (l, h):

- focus: the first fall of the head's entropy ``head_entropy[:, l, h]`` after
  condensation; a head without one has no stage at all;
- asymmetry_lifting: the growth of σ₂ of the head's W_A,h = W_Q,h W_K,hᵀ after focus
  starts (none when the head width k is 1);
- dilution: the first fall of the tracked queries' mean attention on the most frequent
  token (``head_tracked_on_top[:, l, h, :]`` averaged over q) after focus starts and
  before asymmetry lifting ends.

Cycle k ≥ 2, in the window between the end of σ_k(W_A,h)'s growth and the end of
σ_{k+1}(W_A,h)'s (or the end of the run):

- focus: the first rise of the tracked queries' attention on themselves
  (``head_self``);
- dilution: the first fall of the most frequent query's attention on the most
  frequent token (``head_on_top``);
- asymmetry_lifting: the growth of σ_{k+1}(W_A,h).

The list is in time order (by t_start, then the stage's place in a cycle, then layer
and head). A stage still under way at the end of the run ends at the last saved time.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float

from gflow.analysis.stage import STAGE_NAMES, Stage
from gflow.analysis.stages import StageDetector
from gflow.dynamics.trajectory import Trajectory

#: The metrics ``detect_head_stages`` reads (besides ``loss``).
HEAD_STAGE_METRICS = (
    "head_entropy",
    "head_on_top",
    "head_tracked_on_top",
    "head_self",
    "sv_W_A",
)


#: The former name of a head's ``Stage`` (one type now; old imports keep working).
HeadStage = Stage


def _first(candidates):
    return candidates[0] if candidates else None


def _condensation(
    detector: StageDetector, t: Float[np.ndarray, " n"], metrics: dict
) -> tuple[float, float] | None:
    """(t_start, t_end) of the global condensation, or None (module docstring)."""
    if "unigram_gap" in metrics:
        gap = np.asarray(metrics["unigram_gap"], float)
        if gap[0] > 0 and np.any(gap <= detector.edge * gap[0]):
            return float(t[0]), float(t[int(np.argmax(gap <= detector.edge * gap[0]))])
        return None
    loss = np.asarray(metrics["loss"], float)
    if t.size < 2:
        return None
    rate = -np.gradient(loss, t)
    peak = float(np.max(rate))
    if not peak > 0:
        return None
    fall = _first(detector.moves(t, rate / peak, sign=-1))
    return None if fall is None else (float(t[0]), fall[1])


def _head_stages(
    detector: StageDetector,
    t: Float[np.ndarray, " n"],
    metrics: dict[str, np.ndarray],
    layer: int,
    head: int,
    after: float,
) -> list[Stage]:
    """The stages of one head, cycle by cycle (module docstring)."""
    ent = metrics["head_entropy"][:, layer, head]
    sv = metrics["sv_W_A"][:, layer, head, :]  # [n, k]
    tracked = metrics["head_tracked_on_top"][:, layer, head, :]  # [n, q]
    self_attn = metrics["head_self"][:, layer, head]
    top_on_top = metrics["head_on_top"][:, layer, head]

    def stage(name, span, cycle):
        return Stage(name, span[0], span[1], cycle, layer, head)

    focus = _first(detector.moves(t, ent, sign=-1, window=(after, np.inf)))
    if focus is None:
        return []
    stages = [stage("focus", focus, 1)]
    lift = detector.growth(t, sv[:, 1], after=focus[0]) if sv.shape[1] > 1 else None
    end = lift[1] if lift is not None else np.inf
    dil = None
    if tracked.shape[1]:  # no tracked query, no dilution signal
        dil = _first(
            detector.moves(t, tracked.mean(axis=1), sign=-1, window=(focus[0], end))
        )
    if dil is not None:
        stages.append(stage("dilution", dil, 1))
    cycle = 1
    while lift is not None:
        stages.append(stage("asymmetry_lifting", lift, cycle))
        cycle += 1
        nxt = None
        if cycle < sv.shape[1]:
            nxt = detector.growth(t, sv[:, cycle], after=lift[1])
        window = (lift[1], nxt[1] if nxt is not None else np.inf)
        focus = _first(detector.moves(t, self_attn, sign=+1, window=window))
        if focus is not None:
            stages.append(stage("focus", focus, cycle))
        dil = _first(detector.moves(t, top_on_top, sign=-1, window=window))
        if dil is not None:
            stages.append(stage("dilution", dil, cycle))
        lift = nxt
    return stages


def detect_head_stages(
    trajectory: Trajectory, *, detector: StageDetector | None = None
) -> list[Stage]:
    """The stages of every attention head of a Transformer run, in time order.

    Args:
        trajectory: a Trajectory whose metrics hold ``loss`` and the
            ``HeadObservables`` metrics ``head_entropy`` [n, l, h], ``head_on_top``
            [n, l, h], ``head_tracked_on_top`` [n, l, h, q], ``head_self`` [n, l, h]
            and ``sv_W_A`` [n, l, h, k]; ``unigram_gap`` [n] is used when present.
        detector: the thresholds (default ``StageDetector()``).

    Returns:
        ``Stage`` list: the global condensation (layer = head = -1) and each
        head's focus, dilution and asymmetry lifting per cycle (rules: module
        docstring), sorted by t_start, stage order in a cycle, layer, head.
    """
    detector = StageDetector() if detector is None else detector
    m = trajectory.metrics
    missing = [k for k in HEAD_STAGE_METRICS if k not in m]
    if missing:
        raise ValueError(
            f"detect_head_stages needs the metrics {missing}; record them with "
            "observables=HeadObservables(...)"
        )
    t = np.asarray(trajectory.t, float)
    metrics = {k: np.asarray(m[k], float) for k in HEAD_STAGE_METRICS}
    n_layers, n_heads = metrics["head_entropy"].shape[1:3]
    for k in HEAD_STAGE_METRICS:
        shape = metrics[k].shape
        if shape[0] != t.size or shape[1:3] != (n_layers, n_heads):
            raise ValueError(
                f"metric {k!r} has shape {shape}; expected [{t.size}, {n_layers}, "
                f"{n_heads}, ...] like head_entropy"
            )
    stages: list[Stage] = []
    cond = _condensation(detector, t, m)
    if cond is not None:
        stages.append(Stage("condensation", cond[0], cond[1], 1, -1, -1))
    after = cond[1] if cond is not None else float(t[0])
    for layer in range(n_layers):
        for head in range(n_heads):
            stages += _head_stages(detector, t, metrics, layer, head, after)
    return sorted(
        stages,
        key=lambda s: (s.t_start, STAGE_NAMES.index(s.stage), s.layer, s.head),
    )
