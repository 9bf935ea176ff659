"""Per-head stage detection for the deep Transformer (issues 14, 55).

``detect_head_stages(trajectory)`` applies the stage rules of docs/stage_rules.md to
every attention head separately, on the signals that ``HeadObservables`` records
(each with a leading time axis). The attention rules read *excess* mass: a head's
mass on a key class (``gflow.analysis.key_classes``: the most frequent token, the
query's own token, the previous position, the first position, the induction
target) minus the share uniform causal attention gives it, averaged over the
sample's query rows (``head_key_excess`` [n, l, h, C]), over the tracked
low-frequency queries' rows (``head_tracked_key_excess``) or over the most
frequent token's rows (``head_top_query_excess`` [n, l, h]). A move counts when it
spans ``margin`` (``StageDetector``); moves are those of ``StageDetector``
(``closed_moves``, ``closed_growth``), causal: a stage the run ends before closing
is ``provisional``.

The paper's stages (``Stage.is_paper_stage``):

- condensation (global, ``layer = head = -1``): from the first saved time to the
  time ``unigram_gap`` (L - H(π)) has fallen to ``edge`` (5%) of its initial value,
  when the trajectory records it; otherwise to the end (95%) of the first fall of
  the loss rate -dL/dt normalised by its peak so far (closed once that fall is
  confirmed or its end lies within ``edge`` of a zero rate);
- focus, cycle 1 (key ``top``): the first rise of the head's excess on the most
  frequent token over every query row by ``margin``, ending at least ``margin``
  above the uniform baseline; defined only when that token is at least
  ``min_dominance`` times as frequent as the next in the sample
  (``top_dominance``): on a uniform π or on in-context chains the rule, and the
  paper's stages after it, report nothing, with a warning; and reported only in
  a run whose loss falls ``min_information`` below the unigram loss
  (``unigram_gap``, where recorded): on i.i.d. tokens no attention move carries
  information, and none is the paper's;
- dilution, cycle 1 (key ``top``): the first fall of the tracked (low-frequency)
  queries' excess on the most frequent token after the head's focus starts and
  before the paper's lifting of cycle 1 ends;
- asymmetry lifting (global): the growth of σ_{k+1}(W_E) (``sv_W_E``) for cycle
  k, the first after the first head's paper focus starts (none without one);
- cycle k ≥ 2, between the end of σ_k(W_E)'s growth and the end of σ_{k+1}(W_E)'s:
  focus (key ``self``), the first rise of the tracked queries' excess on
  themselves; dilution (key ``top``), the first fall of the most frequent query's
  excess on itself.

Other named moves of each head, never counted as the paper's stages (each once
per head, cycle 1):

- ``entropy_fall``: the first fall of the head's last-row entropy after
  condensation (the rule "focus" had before it named its key), with ``key`` the
  class whose excess rose most over it, ``diffuse`` if none rose by ``margin``;
- ``self_focus``, ``previous_token_focus``, ``first_position_focus``,
  ``induction_focus``: the first rise of the excess over every query row on that
  class;
- ``head_lifting``: the growth of σ₂, σ₃, ... of the head's own W_A,h = W_Q,h W_K,hᵀ
  (``sv_W_A``) after condensation, cycle by cycle.

The list is in time order (by t_start, then the stage's place in a cycle, then layer
and head). A stage still under way at the end of the run ends at the last saved time
and is provisional.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float

from gflow.analysis.key_classes import KEY_CLASSES, moved_onto
from gflow.analysis.stage import ALL_NAMES, Stage
from gflow.analysis.stages import StageDetector, has_frequent_token
from gflow.dynamics.trajectory import Trajectory

#: The metrics ``detect_head_stages`` reads (besides ``loss``).
HEAD_STAGE_METRICS = (
    "head_entropy",
    "head_key_excess",
    "head_tracked_key_excess",
    "head_top_query_excess",
    "sv_W_A",
)

#: The other moves onto one key class, by the class's index in ``KEY_CLASSES``.
CLASS_MOVES = {
    1: "self_focus",
    2: "previous_token_focus",
    3: "first_position_focus",
    4: "induction_focus",
}

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


def _paper_focus(detector, t, metrics, layer, head):
    """The head's cycle-1 focus: the first rise of its excess on the top token."""
    excess = metrics["head_key_excess"][:, layer, head, 0]
    return _first(detector.rises_above(t, excess))


def _other_moves(detector, t, metrics, layer, head, after) -> list[Stage]:
    """The head's named moves that are not the paper's stages (module docstring)."""
    excess = metrics["head_key_excess"][:, layer, head, :]  # [n, C]
    start, known = after
    out = []
    ent = metrics["head_entropy"][:, layer, head]
    fall = _first(detector.closed_moves(t, ent, sign=-1, window=(start, np.inf)))
    if fall is not None:
        i0, i1 = np.searchsorted(t, fall[0]), np.searchsorted(t, fall[1])
        key = moved_onto(excess[i0], excess[i1], detector.margin)
        out.append(
            Stage(
                "entropy_fall",
                fall[0],
                fall[1],
                1,
                layer,
                head,
                provisional=not (known and fall[3]),
                key=key,
            )
        )
    for c, name in CLASS_MOVES.items():
        rise = _first(detector.rises_above(t, excess[:, c]))
        if rise is not None:
            out.append(
                Stage(
                    name,
                    rise[0],
                    rise[1],
                    1,
                    layer,
                    head,
                    provisional=not rise[3],
                    key=KEY_CLASSES[c],
                )
            )
    sv = metrics["sv_W_A"][:, layer, head, :]  # [n, k]
    for cycle, lift in enumerate(_liftings(detector, t, sv, start, known), start=1):
        out.append(
            Stage(
                "head_lifting",
                lift[0],
                lift[1],
                cycle,
                layer,
                head,
                provisional=not lift[2],
            )
        )
    return out


def _paper_head_stages(
    detector: StageDetector,
    t: Float[np.ndarray, " n"],
    metrics: dict[str, np.ndarray],
    layer: int,
    head: int,
    lifts: list[tuple[float, float, bool]],
) -> list[Stage]:
    """The paper's focus and dilution of one head, cycle by cycle (module
    docstring); ``lifts``: the global liftings of σ(W_E)."""
    focus = _paper_focus(detector, t, metrics, layer, head)
    if focus is None:
        return []
    moves = detector.margined()

    def stage(name, span, cycle, closed, key):
        return Stage(
            name, span[0], span[1], cycle, layer, head, provisional=not closed, key=key
        )

    known = bool(focus[3])
    stages = [stage("focus", focus, 1, known, "top")]
    tracked_top = metrics["head_tracked_key_excess"][:, layer, head, 0]
    tracked_self = metrics["head_tracked_key_excess"][:, layer, head, 1]
    top_on_top = metrics["head_top_query_excess"][:, layer, head]
    windows = [(focus[0], known)] + [(lift[1], known and lift[2]) for lift in lifts]
    for cycle, (w0, w0_known) in enumerate(windows, start=1):
        end = lifts[cycle - 1] if cycle - 1 < len(lifts) else None
        window = (w0, end[1] if end is not None else np.inf)
        closed_end = end is not None and end[2] and w0_known
        if cycle == 1:
            signals = [("dilution", tracked_top, -1, "top")]
        else:
            signals = [
                ("focus", tracked_self, +1, "self"),
                ("dilution", top_on_top, -1, "top"),
            ]
        for name, signal, sign, key in signals:
            found = _first(
                moves.closed_moves(
                    t, signal, sign=sign, window=window, closed_end=closed_end
                )
            )
            if found is not None:
                stages.append(stage(name, found, cycle, w0_known and found[3], key))
    return stages


def _checked_metrics(trajectory: Trajectory) -> tuple[np.ndarray, dict]:
    m = trajectory.metrics
    missing = [k for k in HEAD_STAGE_METRICS if k not in m]
    if missing:
        raise ValueError(
            f"detect_head_stages needs the metrics {missing}; record them with "
            "observables=HeadObservables(...) (runs saved before gflow recorded "
            "the key-class excess keep the stages they wrote)"
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
    for k in ("head_key_excess", "head_tracked_key_excess"):
        if metrics[k].shape[3:] != (len(KEY_CLASSES),):
            raise ValueError(
                f"metric {k!r} must have {len(KEY_CLASSES)} key classes "
                f"{KEY_CLASSES} on its last axis, got shape {metrics[k].shape}"
            )
    return t, metrics


def detect_head_stages(
    trajectory: Trajectory, *, detector: StageDetector | None = None
) -> list[Stage]:
    """The stages of every attention head of a Transformer run, in time order.

    Args:
        trajectory: a Trajectory whose metrics hold ``loss`` and the
            ``HeadObservables`` metrics ``head_entropy`` [n, l, h],
            ``head_key_excess`` and ``head_tracked_key_excess`` [n, l, h, C],
            ``head_top_query_excess`` [n, l, h] and ``sv_W_A`` [n, l, h, k];
            ``sv_W_E`` [n, k], ``top_dominance`` [n] and ``unigram_gap`` [n] are
            used when present.
        detector: the thresholds (default ``StageDetector()``).

    Returns:
        ``Stage`` list: the global condensation and the paper's liftings of σ(W_E)
        (layer = head = -1), each head's paper focus and dilution per cycle with
        the key class they moved onto, and each head's other named moves (rules:
        module docstring), sorted by t_start, stage order, layer, head.
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
    for layer, head in heads:
        stages += _other_moves(detector, t, metrics, layer, head, after)
    frequent = True
    if "top_dominance" in m:
        dominance = float(np.asarray(m["top_dominance"], float).ravel()[0])
        frequent = np.isnan(dominance) or has_frequent_token(
            [dominance, 1.0], detector.min_dominance, "detect_head_stages"
        )
    if not frequent or not detector.informative(m):
        return _sorted(stages)
    # the paper's lifting opens once some head has begun its paper focus
    starts = []
    for layer, head in heads:
        f = _paper_focus(detector, t, metrics, layer, head)
        if f is not None:
            starts.append((f[0], bool(f[3])))
    lifts = []
    if starts and "sv_W_E" in m:
        sv_E = np.asarray(m["sv_W_E"], float)  # [n, k]
        if sv_E.shape[1] > 1:
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
        stages += _paper_head_stages(detector, t, metrics, layer, head, lifts)
    return _sorted(stages)


def _sorted(stages: list[Stage]) -> list[Stage]:
    return sorted(
        stages,
        key=lambda s: (s.t_start, ALL_NAMES.index(s.stage), s.layer, s.head),
    )
