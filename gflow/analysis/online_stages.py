"""Streaming stage rules: the per-head stages detected as the observations arrive.

``OnlineStageDetector.update(step, t, signals)`` takes one observation of the
signals that ``HeadObservables`` measures (plus the probe ``loss``) and returns the
events it completes. Every rule reads only the observations up to the current one,
and every rule is a threshold crossing: an event is reported at the first
observation at which its rule holds. So an event arrives at most one observation
interval after the crossing happened (``every`` steps for the monitor), except
condensation, whose rate of fall is measured over the last ``window`` intervals
(at most ``window`` intervals late). ``delay(dt)`` gives the bound.

The thresholds are those of ``StageDetector`` (``edge``, ``min_amplitude``,
``growth_start``, ``min_growth``); the rules are the offline ones of
``gflow.analysis.head_stages`` with the relative thresholds, which need the whole
run, replaced by the absolute ones:

- condensation (global, layer = head = -1): the probe loss has fallen by at least
  ``min_amplitude`` from its first value, and its rate of fall over the last
  ``window`` intervals, past its peak, is at most ``edge`` of the peak (the end of
  the first fall of the loss rate, as offline);
- focus, cycle 1 (per head, reported no earlier than condensation): the head's
  entropy ``head_entropy`` is ``min_amplitude`` nats below its running maximum since
  the first observation (a head that collapsed while the loss was still falling is
  reported with condensation; its ``t_onset`` tells when it began);
- dilution, cycle 1 (after the head's focus, until its asymmetry lifting): the
  tracked queries' mean attention on the most frequent token
  (``head_tracked_on_top``) is ``min_amplitude`` below its running maximum since the
  focus;
- asymmetry lifting, cycle c: σ_{c+1}(W_A,h) (``sv_W_A``) has grown ``min_growth``-fold
  above its running minimum since the cycle's focus (c = 1) or since the previous
  lifting; the event's ``t_onset`` is when the growth passed ``growth_start``
  (ln 2, the offline start);
- asymmetry lifting of the embedding, cycle c (global, layer = head = -1; the
  one-layer rule of MODEL.md §6): σ_{c+1}(W_E) (``sv_W_E``, when the model has
  W_E) has grown ``min_growth``-fold above its running minimum since the first
  head's focus (c = 1) or since the previous one;
- cycle c ≥ 2 of a head (opened by its lifting of cycle c - 1): focus when the tracked
  queries' attention on themselves (``head_self``) is ``min_amplitude`` above its
  running minimum, dilution when the most frequent query's attention on the most
  frequent token (``head_on_top``) is ``min_amplitude`` below its running maximum,
  both since the cycle opened.

Each rule fires once per head and cycle. An event is a ``Stage``
(``gflow.analysis.stage``) at the instant it was reported: ``stage``, ``layer``,
``head``, ``cycle``, ``step``, ``t_start = t_end`` (the report time), ``onset``
(when the move began: the last observation at which the signal was within ``edge``
(5%) of the threshold of the extremum it is measured from; for a lifting, when the
growth passed ``growth_start``), ``signal``, ``value``, ``reference`` (that
extremum) and ``threshold``; ``Stage.to_dict`` writes it as the monitor's
events.jsonl line (``event``, ``t``, ``t_onset``, ...).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np
from jaxtyping import ArrayLike

from gflow.analysis.stage import Stage
from gflow.analysis.stages import StageDetector

#: The signals ``OnlineStageDetector.update`` needs (``sv_W_A`` is optional).
ONLINE_SIGNALS = (
    "loss",
    "head_entropy",
    "head_on_top",
    "head_tracked_on_top",
    "head_self",
)


def _event(
    name: str,
    layer: int,
    head: int,
    cycle: int,
    step: int,
    t: float,
    *,
    onset: float,
    signal: str,
    value: float,
    reference: float,
    threshold: float,
) -> Stage:
    """The event ``name`` of a head (layer = head = -1: a global one) reported at
    (step, t)."""
    t = float(t)
    return Stage(
        name,
        t,
        t,
        int(cycle),
        int(layer),
        int(head),
        onset=float(onset),
        step=int(step),
        signal=signal,
        value=float(value),
        reference=float(reference),
        threshold=float(threshold),
    )


@dataclasses.dataclass
class _Move:
    """A move of one signal by ``amount`` away from its running extremum since the
    rule opened: a fall from the running maximum (``sign=-1``) or a rise above the
    running minimum (``+1``). ``near`` is the last time the signal was within
    ``edge`` of ``amount`` of the extremum (when the move began in earnest);
    ``onset`` the first time since the extremum at which it had moved ``start``
    (NaN: not yet)."""

    sign: int
    amount: float
    ref: float
    t_ref: float
    start: float = math.inf
    onset: float = math.nan
    edge: float = 0.05
    near: float = math.nan

    def crossed(self, x: float, t: float) -> bool:
        if self.sign * (self.ref - x) > 0:  # a new extremum: the move starts again
            self.ref, self.t_ref, self.onset = x, t, math.nan
        moved = self.sign * (x - self.ref)
        if moved <= self.edge * self.amount:
            self.near = t
        if math.isnan(self.onset) and moved >= self.start:
            self.onset = t
        return moved >= self.amount


def _head_signal(x: dict[str, np.ndarray], name: str, layer: int, head: int) -> float:
    if name == "tracked_mean":
        return float(np.mean(x["head_tracked_on_top"][layer, head]))
    if name.startswith("log_sv_W_A"):  # ln σ_i(W_A,h), i = the suffix
        sv = x["sv_W_A"][layer, head, int(name[len("log_sv_W_A") :])]
        return math.log(max(float(sv), 1e-300))
    if name.startswith("log_sv_W_E"):  # ln σ_i(W_E), global
        sv = x["sv_W_E"][int(name[len("log_sv_W_E") :])]
        return math.log(max(float(sv), 1e-300))
    return float(x[name][layer, head])


class _Head:
    """The open rules of one head (or of the embedding, layer = head = -1): stage
    name -> (signal, move)."""

    def __init__(self, layer: int, head: int):
        self.layer, self.head, self.cycle = layer, head, 1
        self.rules: dict[str, tuple[str, _Move]] = {}
        self.opened = False


class OnlineStageDetector:
    """The streaming stage rules (module docstring), for any number of heads.

    Args:
        detector: the thresholds (default ``StageDetector()``).
        window: observation intervals over which the loss' rate of fall is measured.
    """

    def __init__(self, detector: StageDetector | None = None, *, window: int = 2):
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be a positive integer, got {window!r}")
        self.detector = StageDetector() if detector is None else detector
        self.window = window
        self.events: list[Stage] = []
        self._heads: list[_Head] | None = None
        self._shape: tuple[int, ...] | None = None
        self._recent: list[tuple[float, float]] = []  # the last window + 1 (t, loss)
        self._first: tuple[float, float] | None = None
        self._peak_rate = 0.0
        self._condensed = False
        self._last_t: float | None = None
        self._ent_max = self._ent_near = None  # each head's entropy maximum so far
        self._embedding = _Head(-1, -1)  # σ(W_E)'s liftings

    def delay(self, dt: float) -> float:
        """The longest time between a rule's crossing and its report when the
        observations are ``dt`` apart (condensation's; the others are ≤ dt)."""
        return self.window * dt

    def update(
        self, step: int, t: float, signals: Mapping[str, ArrayLike]
    ) -> list[Stage]:
        """Read one observation; return the events it completes (they are also
        appended to ``events``)."""
        missing = [k for k in ONLINE_SIGNALS if k not in signals]
        if missing:
            raise ValueError(f"the observation lacks the signals {missing}")
        x = {k: np.asarray(v, float) for k, v in signals.items()}
        shape = x["head_entropy"].shape
        if len(shape) != 2:
            raise ValueError(f"head_entropy must be [layers, heads], got {shape}")
        if self._shape is None:
            self._shape = shape
            self._heads = [
                _Head(i, j) for i in range(shape[0]) for j in range(shape[1])
            ]
        elif shape != self._shape:
            raise ValueError(f"head_entropy changed shape {self._shape} -> {shape}")
        t = float(t)
        if self._last_t is not None and not t > self._last_t:
            raise ValueError(f"times must increase: {t} after {self._last_t}")
        self._last_t = t
        new: list[Stage] = []
        if not self._condensed:
            ent = x["head_entropy"]
            if self._ent_max is None:
                self._ent_max, self._ent_near = ent.copy(), np.full(shape, t)
            self._ent_max = np.maximum(ent, self._ent_max)
            near = (
                self._ent_max - ent <= self.detector.edge * self.detector.min_amplitude
            )
            self._ent_near = np.where(near, t, self._ent_near)
            self._condensation(step, t, float(x["loss"]), x, new)
        else:
            for head in self._heads:
                self._step_head(head, step, t, x, new)
            self._step_embedding(step, t, x, new)
        self.events += new
        return new

    def _condensation(self, step, t, loss, x, new) -> None:
        if self._first is None:
            self._first = (t, loss)
        self._recent = [*self._recent, (t, loss)][-(self.window + 1) :]
        if len(self._recent) <= self.window:
            return
        (t0, l0), (t1, l1) = self._recent[0], self._recent[-1]
        rate = (l0 - l1) / (t1 - t0)
        d = self.detector
        past_peak = rate < self._peak_rate
        self._peak_rate = max(self._peak_rate, rate)
        fell = self._first[1] - loss
        if fell >= d.min_amplitude and past_peak and rate <= d.edge * self._peak_rate:
            self._condensed = True
            new.append(
                _event(
                    "condensation",
                    -1,
                    -1,
                    1,
                    step,
                    t,
                    onset=self._first[0],
                    signal="loss",
                    value=loss,
                    reference=self._first[1],
                    threshold=d.min_amplitude,
                )
            )
            for head in self._heads:  # every head's focus window opens, measured
                self._open(head, "focus", "head_entropy", -1, x, t)  # from the
                _, move = head.rules["focus"]  # highest entropy so far: a head that
                move.ref = float(self._ent_max[head.layer, head.head])  # fell while
                move.near = float(self._ent_near[head.layer, head.head])  # the loss
                self._step_head(head, step, t, x, new)  # did is reported at once

    def _open(self, head: _Head, stage, signal, sign, x, t, amount=None, start=None):
        d = self.detector
        value = _head_signal(x, signal, head.layer, head.head)
        move = _Move(
            sign,
            d.min_amplitude if amount is None else amount,
            value,
            t,
            start=math.inf if start is None else start,
            edge=d.edge,
            near=t,
        )
        head.rules[stage] = (signal, move)

    def _open_lift(self, head: _Head, x, t) -> None:
        """σ_{c+1}'s growth (of W_A,h for a head, of W_E for the embedding), when the
        model gives enough singular values."""
        name = "sv_W_E" if head.layer < 0 else "sv_W_A"
        sv = x.get(name)
        if sv is not None and sv.shape[-1] > head.cycle:
            d = self.detector
            self._open(
                head,
                "asymmetry_lifting",
                f"log_{name}{head.cycle}",
                +1,
                x,
                t,
                amount=math.log(d.min_growth),
                start=d.growth_start,
            )

    def _step_embedding(self, step, t, x, new) -> None:
        """σ(W_E)'s liftings: the first opens at the first head's focus."""
        emb = self._embedding
        if not emb.opened and any(e.stage == "focus" for e in self.events + new):
            emb.opened = True
            self._open_lift(emb, x, t)
        self._step_head(emb, step, t, x, new)

    def _step_head(self, head: _Head, step, t, x, new) -> None:
        fired = []
        for stage, (signal, move) in list(head.rules.items()):
            value = _head_signal(x, signal, head.layer, head.head)
            if not move.crossed(value, t):
                continue
            del head.rules[stage]
            fired.append(stage)
            lift = stage == "asymmetry_lifting"
            onset = move.onset if lift else move.near
            shown = math.exp(value) if lift else value
            ref = math.exp(move.ref) if lift else move.ref
            amount = math.exp(move.amount) if lift else move.amount
            new.append(
                _event(
                    stage,
                    head.layer,
                    head.head,
                    head.cycle,
                    step,
                    t,
                    onset=onset,
                    signal=signal[4:-1] if lift else signal,
                    value=shown,
                    reference=ref,
                    threshold=amount,
                )
            )
        if head.layer < 0:  # the embedding: its cycles are its liftings
            if fired:
                head.cycle += 1
                self._open_lift(head, x, t)
            return
        if "focus" in fired and head.cycle == 1:
            if x["head_tracked_on_top"].shape[-1]:  # no tracked query: no dilution
                self._open(head, "dilution", "tracked_mean", -1, x, t)
            self._open_lift(head, x, t)
        if "asymmetry_lifting" in fired:  # the next cycle opens
            head.rules.clear()
            head.cycle += 1
            self._open(head, "focus", "head_self", +1, x, t)
            self._open(head, "dilution", "head_on_top", -1, x, t)
            self._open_lift(head, x, t)
