"""Streaming stage rules: the per-head stages detected as the observations arrive.

``OnlineStageDetector.update(step, t, signals)`` takes one observation of the
signals that ``HeadObservables`` measures (plus the probe ``loss``) and returns the
events it completes. Every rule reads only the observations up to the current one,
and every rule is a threshold crossing: an event is reported at the first
observation at which its rule holds. So an event arrives at most one observation
interval after the crossing happened (``every`` steps for the monitor), except
condensation, whose rate of fall is measured over the last ``window`` intervals
(at most ``window`` intervals late). ``delay(dt)`` gives the bound.

The rules are the offline ones of ``gflow.analysis.head_stages`` (docs/stage_rules.md)
with the relative thresholds, which need the whole run, replaced by absolute ones
(``StageDetector``'s ``edge``, ``min_amplitude``, ``margin``, ``growth_start``,
``min_growth``). The attention rules read the key-class excess signals
(``head_key_excess`` and ``head_tracked_key_excess`` [l, h, C], class order
``gflow.analysis.key_classes.KEY_CLASSES``; ``head_top_query_excess`` [l, h]):

- condensation (global, layer = head = -1): the probe loss has fallen by at least
  ``min_amplitude`` from its first value, and its rate of fall over the last
  ``window`` intervals, past its peak, is at most ``edge`` of the peak;
- the paper's focus, cycle 1 (key ``top``; only with ``frequent_token``): the
  head's excess on the most frequent token over every query row has risen
  ``margin`` above its running minimum since the first observation and is at
  least ``margin`` (reported no earlier than condensation, and, when the
  observations carry ``unigram_gap``, no earlier than the gap has stayed at or
  below ``-min_information`` for ``information_saves`` observations: a run
  whose attention carries no information has no paper stage; ``t_onset`` tells
  when it began);
- the paper's dilution, cycle 1 (key ``top``): the tracked queries' excess on the
  most frequent token is ``margin`` (and ``min_move`` of its range so far) below
  its running maximum since the first observation, reported no earlier than the
  head's focus (a fall during the focus's rise is reported with the focus: the
  offline rule, whose window opens at the focus's start, finds it too);
- the paper's asymmetry lifting, cycle c (global): σ_{c+1}(W_E) (``sv_W_E``) has
  grown ``min_growth``-fold above its running minimum since the first head's paper
  focus (c = 1) or since the previous lifting's end (``t_onset``: when the growth
  passed ``growth_start``). Its end is the first observation, after the report,
  at which the growth rate of ln σ_{c+1} over the last ``window`` intervals is
  below a quarter of its peak since the onset (the offline rule's end, read
  causally); the end opens cycle c + 1 of every head that has focused and the
  next lifting, as the offline windows open there (a cycle opened at the report
  would count the rest of cycle c's move, still rising, as cycle c + 1's);
- cycle c ≥ 2 of a head: focus (key ``self``) when the tracked queries' excess on
  themselves is ``margin`` above its running minimum, dilution (key ``top``) when
  the most frequent query's excess on itself is ``margin`` below its running
  maximum, both since the cycle opened.

The other named moves (never the paper's stages), each once per head:
``entropy_fall`` (the head's entropy ``min_amplitude`` nats below its running
maximum since the first observation; ``key``: the class whose excess rose most from
its onset to its report, or ``diffuse``), ``self_focus``, ``previous_token_focus``,
``first_position_focus``, ``induction_focus`` (that class's excess over every query
row ``margin`` above its running minimum), all reported no earlier than
condensation, and ``head_lifting`` cycle c (σ_{c+1}(W_A,h), ``sv_W_A``, grown
``min_growth``-fold above its running minimum since condensation or the head's
previous one).

An event is a ``Stage`` (``gflow.analysis.stage``) at the instant it was reported:
``stage``, ``layer``, ``head``, ``cycle``, ``step``, ``t_start = t_end`` (the report
time), ``onset`` (when the move began: the last observation at which the signal
was within ``edge`` (5%) of the threshold of the extremum it is measured from; for
a lifting, when the growth passed ``growth_start``), ``signal``, ``value``,
``reference`` (that extremum), ``threshold`` and ``key``; ``Stage.to_dict`` writes
it as the monitor's events.jsonl line.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np
from jaxtyping import ArrayLike

from gflow.analysis.key_classes import KEY_CLASSES, moved_onto
from gflow.analysis.stage import Stage
from gflow.analysis.stages import StageDetector

#: The signals ``OnlineStageDetector.update`` needs (``sv_W_A`` and ``sv_W_E`` are
#: optional).
ONLINE_SIGNALS = (
    "loss",
    "head_entropy",
    "head_key_excess",
    "head_tracked_key_excess",
    "head_top_query_excess",
)

#: The other moves onto one key class, by the class's index in ``KEY_CLASSES``.
_CLASS_MOVES = {
    1: "self_focus",
    2: "previous_token_focus",
    3: "first_position_focus",
    4: "induction_focus",
}


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
    key: str | None = None,
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
        key=key,
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
    #: the move must also span this fraction of the signal's range since the rule
    #: opened (the offline rules' ``min_move``; 0: the amount alone)
    relative: float = 0.0
    lo: float = math.inf
    hi: float = -math.inf

    def crossed(self, x: float, t: float) -> bool:
        if self.sign * (self.ref - x) > 0:  # a new extremum: the move starts again
            self.ref, self.t_ref, self.onset = x, t, math.nan
        self.lo, self.hi = min(self.lo, x, self.ref), max(self.hi, x, self.ref)
        amount = max(self.amount, self.relative * (self.hi - self.lo))
        moved = self.sign * (x - self.ref)
        if moved <= self.edge * amount:
            self.near = t
        if math.isnan(self.onset) and moved >= self.start:
            self.onset = t
        return moved >= amount


def _head_signal(x: dict[str, np.ndarray], name: str, layer: int, head: int) -> float:
    """The scalar signal ``name`` of head (layer, head) in the observation ``x``."""
    for prefix in ("head_tracked_key_excess", "head_key_excess"):
        if name.startswith(prefix + ":"):  # one key class: "<metric>:<index>"
            return float(x[prefix][layer, head, int(name.split(":")[1])])
    if name.startswith("log_sv_W_A"):  # ln σ_i(W_A,h), i = the suffix
        sv = x["sv_W_A"][layer, head, int(name[len("log_sv_W_A") :])]
        return math.log(max(float(sv), 1e-300))
    if name.startswith("log_sv_W_E"):  # ln σ_i(W_E), global
        sv = x["sv_W_E"][int(name[len("log_sv_W_E") :])]
        return math.log(max(float(sv), 1e-300))
    return float(x[name][layer, head])


@dataclasses.dataclass
class _Rule:
    """One open rule: the stage it reports, its signal, its move, its cycle and the
    key class it names."""

    stage: str
    signal: str
    move: _Move
    cycle: int
    key: str | None = None
    pending: float | None = None  # the value at a crossing before condensation
    level: float | None = None  # the value must also reach this (a paper focus)
    gated: bool = False  # reported only once the run has proved informative


class _Head:
    """The open rules of one head (or of the embedding, layer = head = -1)."""

    def __init__(self, layer: int, head: int):
        self.layer, self.head = layer, head
        self.cycle = 1  # the paper's cycle (the embedding: its next lifting's)
        self.lift_cycle = 1  # the head's own lifting's
        self.rules: dict[str, _Rule] = {}
        self.opened = False
        self.focused = False
        self.dilution_opened = False
        #: a reported lifting whose growth has not ended: (t, ln σ) since its
        #: onset, the index of σ, the peak rate so far and the number of rates read
        self.ending: tuple[list[tuple[float, float]], int, float, int] | None = None
        self.trace: list[tuple[float, float]] = []  # the open lifting's (t, ln σ)


class OnlineStageDetector:
    """The streaming stage rules (module docstring), for any number of heads.

    Args:
        detector: the thresholds (default ``StageDetector()``).
        window: observation intervals over which the loss' rate of fall is measured.
        frequent_token: whether the data has a most frequent token (the paper's
            cycle-1 focus onto it is defined only then: ``top_dominance`` at least
            ``min_dominance``); False silences the paper's stages.
    """

    def __init__(
        self,
        detector: StageDetector | None = None,
        *,
        window: int = 2,
        frequent_token: bool = True,
    ):
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be a positive integer, got {window!r}")
        self.detector = StageDetector() if detector is None else detector
        self.window = window
        self.frequent_token = bool(frequent_token)
        self.events: list[Stage] = []
        self._heads: list[_Head] | None = None
        self._shape: tuple[int, ...] | None = None
        self._recent: list[tuple[float, float]] = []  # the last window + 1 (t, loss)
        self._first: tuple[float, float] | None = None
        self._peak_rate = 0.0
        self._condensed = False
        self._last_t: float | None = None
        self._history: list[tuple[float, np.ndarray]] = []  # (t, head_key_excess)
        # the tracked queries' excess on the top token per head since the first
        # observation: its largest value, when, and its smallest value
        self._tracked_top: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._informed = False  # the loss has fallen min_information below unigram
        self._below = 0  # ... at this many consecutive observations so far
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
            for head in self._heads:  # measured from the first observation
                self._open_first(head, x, float(t))
        elif shape != self._shape:
            raise ValueError(f"head_entropy changed shape {self._shape} -> {shape}")
        t = float(t)
        if self._last_t is not None and not t > self._last_t:
            raise ValueError(f"times must increase: {t} after {self._last_t}")
        self._last_t = t
        self._history.append((t, x["head_key_excess"].copy()))
        tracked = x["head_tracked_key_excess"][..., 0]
        if self._tracked_top is None:
            self._tracked_top = (tracked.copy(), np.full(shape, t), tracked.copy())
        else:
            hi, t_hi, lo = self._tracked_top
            higher = tracked > hi
            hi[higher], t_hi[higher] = tracked[higher], t
            np.minimum(lo, tracked, out=lo)
        gap = x.get("unigram_gap")
        if gap is None:
            self._informed = True  # no gap recorded: the gate cannot be read
        elif float(gap) <= -self.detector.min_information:
            self._below += 1  # consecutive observations below the unigram loss
            if self._below >= self.detector.information_saves:
                self._informed = True
        else:
            self._below = 0
        new: list[Stage] = []
        if not self._condensed:
            for head in self._heads:  # track the moves; report after condensation
                for rule in list(head.rules.values()):
                    value = _head_signal(x, rule.signal, head.layer, head.head)
                    if self._crossed(rule, value, t) and rule.pending is None:
                        rule.pending = value
                        if rule.stage == "focus":
                            self._open_dilution(head, x, t)
            self._condensation(step, t, float(x["loss"]), x, new)
        if self._condensed:
            for head in self._heads:
                self._step_head(head, step, t, x, new)
            self._step_embedding(step, t, x, new)
        self.events += new
        return new

    def _open_first(self, head: _Head, x, t) -> None:
        """The rules measured from the first observation."""
        d = self.detector
        if self.frequent_token:
            self._open(head, "focus", "head_key_excess:0", +1, x, t, key="top")
            head.rules["focus"].level = d.margin  # above the baseline by the margin
            head.rules["focus"].gated = True  # and only once the run informs
        self._open(head, "entropy_fall", "head_entropy", -1, x, t, d.min_amplitude)
        for c, name in _CLASS_MOVES.items():
            self._open(head, name, f"head_key_excess:{c}", +1, x, t, key=KEY_CLASSES[c])
            head.rules[name].level = d.margin

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
            for head in self._heads:  # the heads' own liftings open here
                self._open_lift(head, x, t)

    def _open(self, head, stage, signal, sign, x, t, amount=None, start=None, key=None):
        d = self.detector
        value = _head_signal(x, signal, head.layer, head.head)
        move = _Move(
            sign,
            d.margin if amount is None else amount,
            value,
            t,
            start=math.inf if start is None else start,
            edge=d.edge,
            near=t,
        )
        cycle = head.lift_cycle if stage == "head_lifting" else head.cycle
        head.rules[stage] = _Rule(stage, signal, move, cycle, key)

    def _open_lift(self, head: _Head, x, t) -> None:
        """σ_{c+1}'s growth (of W_A,h for a head, of W_E for the embedding), when the
        observation gives enough singular values."""
        emb = head.layer < 0
        name, c = ("sv_W_E", head.cycle) if emb else ("sv_W_A", head.lift_cycle)
        sv = x.get(name)
        if sv is not None and sv.shape[-1] > c:
            d = self.detector
            self._open(
                head,
                "asymmetry_lifting" if emb else "head_lifting",
                f"log_{name}{c}",
                +1,
                x,
                t,
                amount=math.log(d.min_growth),
                start=d.growth_start,
            )

    def _step_embedding(self, step, t, x, new) -> None:
        """σ(W_E)'s liftings: the first opens at the first head's paper focus; the
        end of each opens the next paper cycle of every head that has focused, and
        the next lifting."""
        emb = self._embedding
        if not emb.opened and any(h.focused for h in self._heads):
            emb.opened = True
            self._open_lift(emb, x, t)
        if emb.ending is not None:
            if self._growth_ended(emb, x, t):
                emb.ending = None
                self._open_lift(emb, x, t)
                self._open_cycle(emb.cycle, x, t)
            return
        rule = emb.rules.get("asymmetry_lifting")
        if rule is not None:
            emb.trace.append((t, self._log_sv(x, emb.cycle)))
        if self._step_rules(emb, step, t, x, new):
            # the growth so far, from its onset: the rate's peak is read on it
            trace = [(s, v) for s, v in emb.trace if s >= rule.move.onset]
            rates = self._rates(trace)
            emb.ending = (trace, emb.cycle, max(rates, default=-math.inf), len(rates))
            emb.cycle += 1
            emb.trace = []

    @staticmethod
    def _log_sv(x, i: int) -> float:
        return math.log(max(float(x["sv_W_E"][i]), 1e-300))

    def _rates(self, trace: list[tuple[float, float]]) -> list[float]:
        """The growth rates of ln σ over ``window`` intervals along ``trace``."""
        w = self.window
        return [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(trace[:-w], trace[w:])]

    def _growth_ended(self, emb: _Head, x, t: float) -> bool:
        """Whether the reported lifting's growth rate of ln σ, over the last
        ``window`` intervals, has fallen below a quarter of its peak."""
        trace, i, peak, n = emb.ending
        trace.append((t, self._log_sv(x, i)))
        if len(trace) <= self.window:
            return False
        rate = self._rates(trace[-self.window - 1 :])[0]
        peak, n = max(peak, rate), n + 1
        emb.ending = (trace, i, peak, n)
        return n > 1 and rate < 0.25 * peak

    def _open_cycle(self, cycle: int, x, t: float) -> None:
        """Cycle ``cycle`` of every head that has focused: its focus (key ``self``)
        and dilution (key ``top``), measured from here."""
        for head in self._heads:
            if head.focused:
                for stage in ("focus", "dilution"):
                    head.rules.pop(stage, None)
                head.cycle = cycle
                self._open(
                    head, "focus", "head_tracked_key_excess:1", +1, x, t, key="self"
                )
                self._open(
                    head, "dilution", "head_top_query_excess", -1, x, t, key="top"
                )

    def _step_rules(self, head: _Head, step, t, x, new) -> list[str]:
        fired = []
        for stage, rule in list(head.rules.items()):
            value = _head_signal(x, rule.signal, head.layer, head.head)
            move = rule.move
            if not self._crossed(rule, value, t):
                if rule.pending is None:
                    continue
                value = rule.pending  # crossed before condensation: report it now
            if rule.gated and not self._informed:
                rule.pending = value if rule.pending is None else rule.pending
                if stage == "focus":
                    self._open_dilution(head, x, t)
                continue  # held until the run proves informative
            del head.rules[stage]
            fired.append(stage)
            lift = stage in ("asymmetry_lifting", "head_lifting")
            onset = move.onset if lift else move.near
            key = rule.key
            if stage == "entropy_fall":
                key = moved_onto(
                    self._excess_at(onset)[head.layer, head.head],
                    x["head_key_excess"][head.layer, head.head],
                    self.detector.margin,
                )
            new.append(
                _event(
                    stage,
                    head.layer,
                    head.head,
                    rule.cycle,
                    step,
                    t,
                    onset=onset,
                    signal=rule.signal[4:-1] if lift else rule.signal,
                    value=math.exp(value) if lift else value,
                    reference=math.exp(move.ref) if lift else move.ref,
                    threshold=math.exp(move.amount) if lift else move.amount,
                    key=key,
                )
            )
        return fired

    @staticmethod
    def _crossed(rule: _Rule, value: float, t: float) -> bool:
        """The rule's move has crossed its amount (and its level, if any)."""
        moved = rule.move.crossed(value, t)
        return moved and (rule.level is None or value >= rule.level)

    def _excess_at(self, t: float) -> np.ndarray:
        """``head_key_excess`` at the last observation at or before ``t``."""
        times = [h[0] for h in self._history]
        i = max(int(np.searchsorted(times, t, side="right")) - 1, 0)
        return self._history[i][1]

    def _open_dilution(self, head: _Head, x, t) -> None:
        """Cycle 1's dilution (once), opened at the focus's crossing and measured
        from the tracked queries' largest excess on the top token since the run
        began, with the offline rule's relative size (``min_move`` of the
        signal's range so far): the offline rule looks for the first fall from
        the start of the focus's move, which for a first rise is the run's first
        observation (its zigzag's first point). A fall that began during the
        focus's rise, or while the focus was held for condensation or the
        information gate, is not lost; it is reported at the focus."""
        if head.cycle == 1 and not head.dilution_opened:
            head.dilution_opened = True
            self._open(
                head, "dilution", "head_tracked_key_excess:0", -1, x, t, key="top"
            )
            rule = head.rules["dilution"]
            rule.gated = True  # never before its focus
            rule.move.relative = self.detector.min_move
            hi, t_hi, lo = (a[head.layer, head.head] for a in self._tracked_top)
            rule.move.lo, rule.move.hi = float(lo), float(hi)
            if hi > rule.move.ref:
                rule.move.ref, rule.move.t_ref = float(hi), float(t_hi)
                value = _head_signal(x, rule.signal, head.layer, head.head)
                if self._crossed(rule, value, t):  # the fall is already done
                    rule.pending = value

    def _step_head(self, head: _Head, step, t, x, new) -> None:
        fired = self._step_rules(head, step, t, x, new)
        if "focus" in fired and head.cycle == 1:
            head.focused = True
            self._open_dilution(head, x, t)
            dilution = head.rules.get("dilution")
            if dilution is not None and dilution.pending is not None:
                # a fall already done (during the focus's rise): reported with it
                fired += self._step_rules(head, step, t, x, new)
        if "head_lifting" in fired:
            head.lift_cycle += 1
            self._open_lift(head, x, t)
