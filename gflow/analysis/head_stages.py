"""Per-head stage detection for the deep Transformer (issue 14).

``detect_head_stages(trajectory)`` applies the stage rules of docs/markov_cycle.md
(``gflow.analysis.stages``) to every attention head separately, on the signals that
``HeadObservables`` records (each with a leading time axis: ``head_entropy``
[n, l, h], ``head_on_top`` [n, l, h], ``head_tracked_on_top`` [n, l, h, q],
``head_self`` [n, l, h], ``sv_W_A`` [n, l, h, k]; ``sv_W_E`` [n, k] for a model with
an embedding). Moves and growths are those of ``StageDetector`` (``closed_moves``,
``closed_growth``) with its thresholds, causal as there: a stage the run ends before
closing is ``provisional``.

Condensation is global: it is reported once, with ``layer = head = -1``, and it opens
the window of every head's focus. It runs from the first saved time to

- the time ``unigram_gap`` (L - H(π)) has fallen to ``edge`` (5%) of its initial
  value, when the trajectory records it (as ``detect_stages``);
- otherwise the end of the first plateau-bound fall of the loss: the end (95%) of the
  first fall of the loss rate -dL/dt (central differences; |∇L|² for a gradient
  flow), normalised by its peak so far. This stops at the first plateau even when
  later stages take the loss far below it, which the total drop of the loss would
  not. It is closed once the rate's fall is confirmed or its end lies within
  ``edge`` of a zero rate, where a later rate no lower than zero cannot move it.

No condensation (a loss that never falls) opens the windows at the first saved time.

Asymmetry lifting comes in two kinds, told apart by where they are:

- the paper's, global (``layer = head = -1``, like condensation): the growth of
  σ₂(W_E) (σ_{k+1}(W_E) for cycle k), read from ``sv_W_E`` when the run records it
  (a model with an embedding), after the first head's focus starts (as
  ``detect_stages``);
- each head's own (``layer``, ``head`` ≥ 0): the growth of σ₂ of the head's
  W_A,h = W_Q,h W_K,hᵀ after its focus starts (none when the head width k is 1): the
  head's attention gaining a second direction, another quantity than a new
  embedding direction. It delimits the head's cycles, as the online detector's
  per-head lifting does. On the default one-layer Markov flow the global lifting is
  σ₂(W_E)'s [124, 338] and the head's σ₂(W_A) grows later, from t ≈ 460
  (docs/markov_cycle.md, "Horizon").

Cycle 1, per head (l, h):

- focus: the first fall of the head's entropy ``head_entropy[:, l, h]`` after
  condensation; a head without one has no stage at all;
- asymmetry_lifting (the head's own): the growth of σ₂(W_A,h) after focus starts;
- dilution: the first fall of the tracked queries' mean attention on the most
  frequent token (``head_tracked_on_top[:, l, h, :]`` averaged over q) after focus
  starts and before the head's lifting ends.

Cycle k ≥ 2, in the window between the end of σ_k(W_A,h)'s growth and the end of
σ_{k+1}(W_A,h)'s (or the end of the run):

- focus: the first rise of the tracked queries' attention on themselves
  (``head_self``);
- dilution: the first fall of the most frequent query's attention on the most
  frequent token (``head_on_top``);
- asymmetry_lifting (the head's own): the growth of σ_{k+1}(W_A,h).

The list is in time order (by t_start, then the stage's place in a cycle, then layer
and head). A stage still under way at the end of the run ends at the last saved time
and is provisional.
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
) -> tuple[float, float, bool] | None:
    """(t_start, t_end, closed) of the global condensation, or None (module
    docstring)."""
    if "unigram_gap" in metrics:
        gap = np.asarray(metrics["unigram_gap"], float)
        if gap[0] > 0 and np.any(gap <= detector.edge * gap[0]):
            i = int(np.argmax(gap <= detector.edge * gap[0]))
            return float(t[0]), float(t[i]), True
        return None
    loss = np.asarray(metrics["loss"], float)
    if t.size < 2:
        return None
    rate = -np.gradient(loss, t)
    peak = np.maximum.accumulate(rate)  # the peak so far: causal
    if not peak[-1] > 0:
        return None
    scaled = rate / np.where(peak > 0, peak, np.inf)
    fall = _first(detector.closed_moves(t, scaled, sign=-1))
    if fall is None:
        return None
    # A fall still open at the run's end ends at 95% of the way to its lowest rate
    # so far; a later, lower rate moves that point unless it already lies within
    # edge of zero, the floor of a loss that does not rise again: then it is final.
    i1 = int(np.searchsorted(t, fall[1]))
    top = float(np.max(scaled[: i1 + 1]))
    floor_ok = top - fall[2] >= 0 and scaled[i1] <= detector.edge * top
    return float(t[0]), fall[1], bool(fall[3] or floor_ok)


def _liftings(detector, t, sv, after, known):
    """The successive growths of σ₂, σ₃, ... of ``sv`` [n, k]: (t_start, t_end,
    closed) per cycle, each after the previous one's end; closed only while every
    earlier one is."""
    out = []
    for k in range(1, sv.shape[1]):
        nxt = sv[:, k + 1] if k + 1 < sv.shape[1] else None
        lift = detector.closed_growth(t, sv[:, k], after=after, next_sv=nxt)
        if lift is None:
            break
        known = known and lift[2]
        out.append((lift[0], lift[1], known))
        after = lift[1]
    return out


def _head_stages(
    detector: StageDetector,
    t: Float[np.ndarray, " n"],
    metrics: dict[str, np.ndarray],
    layer: int,
    head: int,
    after: tuple[float, bool],
) -> list[Stage]:
    """The stages of one head, cycle by cycle (module docstring)."""
    ent = metrics["head_entropy"][:, layer, head]
    tracked = metrics["head_tracked_on_top"][:, layer, head, :]  # [n, q]
    self_attn = metrics["head_self"][:, layer, head]
    top_on_top = metrics["head_on_top"][:, layer, head]

    def stage(name, span, cycle, closed):
        return Stage(name, span[0], span[1], cycle, layer, head, provisional=not closed)

    start, known = after
    focus = _first(detector.closed_moves(t, ent, sign=-1, window=(start, np.inf)))
    if focus is None:
        return []
    stages = [stage("focus", focus, 1, known and focus[3])]
    known = known and focus[3]
    sv = metrics["sv_W_A"][:, layer, head, :]  # [n, k]
    lifts = _liftings(detector, t, sv, focus[0], known)
    windows = [(focus[0], known)] + [(lift[1], lift[2]) for lift in lifts]
    for cycle, (w0, w0_known) in enumerate(windows, start=1):
        if cycle > 1:
            stages.append(
                stage("asymmetry_lifting", lifts[cycle - 2], cycle - 1, w0_known)
            )
        end = lifts[cycle - 1] if cycle - 1 < len(lifts) else None
        window = (w0, end[1] if end is not None else np.inf)
        closed_end = end is not None and end[2] and w0_known
        if cycle == 1:
            if not tracked.shape[1]:  # no tracked query, no dilution signal
                continue
            signals = [("dilution", tracked.mean(axis=1), -1)]
        else:
            signals = [("focus", self_attn, +1), ("dilution", top_on_top, -1)]
        for name, signal, sign in signals:
            found = _first(
                detector.closed_moves(
                    t, signal, sign=sign, window=window, closed_end=closed_end
                )
            )
            if found is not None:
                stages.append(stage(name, found, cycle, w0_known and found[3]))
    return stages


def _checked_metrics(trajectory: Trajectory) -> tuple[np.ndarray, dict]:
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
    return t, metrics


def detect_head_stages(
    trajectory: Trajectory, *, detector: StageDetector | None = None
) -> list[Stage]:
    """The stages of every attention head of a Transformer run, in time order.

    Args:
        trajectory: a Trajectory whose metrics hold ``loss`` and the
            ``HeadObservables`` metrics ``head_entropy`` [n, l, h], ``head_on_top``
            [n, l, h], ``head_tracked_on_top`` [n, l, h, q], ``head_self`` [n, l, h]
            and ``sv_W_A`` [n, l, h, k]; ``sv_W_E`` [n, k] and ``unigram_gap`` [n]
            are used when present.
        detector: the thresholds (default ``StageDetector()``).

    Returns:
        ``Stage`` list: the global condensation and, with ``sv_W_E``, the global
        (paper's) asymmetry liftings of σ(W_E) (layer = head = -1), and each head's
        focus, dilution and own lifting of σ(W_A,h) per cycle (rules: module
        docstring), sorted by t_start, stage order in a cycle, layer, head.
    """
    detector = StageDetector() if detector is None else detector
    t, metrics = _checked_metrics(trajectory)
    n_layers, n_heads = metrics["head_entropy"].shape[1:3]
    m = trajectory.metrics
    stages: list[Stage] = []
    cond = _condensation(detector, t, m)
    if cond is not None:
        stages.append(
            Stage("condensation", cond[0], cond[1], 1, -1, -1, provisional=not cond[2])
        )
    after = (cond[1], cond[2]) if cond is not None else (float(t[0]), True)
    heads = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
    if "sv_W_E" in m:
        sv_E = np.asarray(m["sv_W_E"], float)  # [n, k]
        # the paper's lifting opens once some head has begun to focus
        starts = []
        for layer, head in heads:
            ent = metrics["head_entropy"][:, layer, head]
            f = _first(
                detector.closed_moves(t, ent, sign=-1, window=(after[0], np.inf))
            )
            if f is not None:
                starts.append((f[0], after[1] and f[3]))
        lifts = []
        if starts and sv_E.shape[1] > 1:
            first = min(starts)
            lifts = _liftings(detector, t, sv_E, first[0], first[1])
        for cycle, lift in enumerate(lifts, start=1):
            stages.append(
                Stage(
                    "asymmetry_lifting",
                    lift[0],
                    lift[1],
                    cycle,
                    -1,
                    -1,
                    provisional=not lift[2],
                )
            )
    for layer, head in heads:
        stages += _head_stages(detector, t, metrics, layer, head, after)
    return sorted(
        stages,
        key=lambda s: (s.t_start, STAGE_NAMES.index(s.stage), s.layer, s.head),
    )
