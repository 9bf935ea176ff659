"""The one result type of the stage detectors: a ``Stage``.

Three detectors return it: ``detect_stages`` (the whole model, offline),
``detect_head_stages`` (per head, offline) and ``OnlineStageDetector`` (per head,
as the observations arrive). What they know differs, so the fields beyond the
first four are optional:

- a whole-model stage (``detect_stages``): ``stage``, ``t_start``, ``t_end``,
  ``cycle``; ``layer = head = None``;
- a head's stage (``detect_head_stages``): also ``layer`` and ``head``, both -1 for
  the global condensation;
- an online event (``OnlineStageDetector``): an instant, ``t_start = t_end`` = the
  time it was reported, with the observation's ``step``, the back-dated ``onset``
  (when the move began), the ``signal`` it was read from, its ``value``, the
  ``reference`` extremum it is measured from and the ``threshold`` it crossed.

An offline stage is *provisional* (``provisional=True``) when the run ended before
the data closed it: its end (or the window it was sought in) may still move when the
run is continued; a closed stage (the default) is the same on every longer horizon
(docs/markov_cycle.md, "Horizon").

``to_dict`` writes each as its files have always held it: stages.json entries
``{"stage", "t_start", "t_end", "cycle"[, "layer", "head"][, "provisional"][,
"key"]}`` (``"provisional": true`` only on a provisional stage, ``"key"`` only on an
attention move) and events.jsonl lines ``{"event", "layer", "head", "cycle", "step",
"t", "t_onset", "signal", "value", "reference", "threshold", "key"}``;
``from_dict`` reads either back (files written before ``key`` existed too).

The paper's stages are ``STAGE_NAMES``; the other moves a head makes
(``MOVE_NAMES``: an entropy fall onto any key, a focus onto itself outside the
paper's cycle, onto the previous or the first position, an induction focus, the
growth of σ₂ of a head's own W_A,h) are stages of this type too, never counted as
the paper's (``is_paper_stage``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

#: The paper's stage names, in the order they occur within a cycle.
STAGE_NAMES = ("condensation", "focus", "dilution", "asymmetry_lifting")
#: Other named moves of a head: reported with the key class they moved onto, never
#: counted as the paper's stages (docs/stage_rules.md).
MOVE_NAMES = (
    "entropy_fall",
    "self_focus",
    "previous_token_focus",
    "first_position_focus",
    "induction_focus",
    "head_lifting",
)
#: Every name a ``Stage`` may carry, paper stages first.
ALL_NAMES = STAGE_NAMES + MOVE_NAMES
#: The values of ``Stage.key``: the key classes of ``gflow.analysis.key_classes``
#: and ``diffuse`` (a move onto none of them).
KEY_NAMES = ("top", "self", "previous", "first", "induction", "diffuse")

# the fields an online event has and an offline stage has not
_EVENT_FIELDS = ("onset", "step", "signal", "value", "reference", "threshold")


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage: its name, cycle and time span, and where and how it was found.

    Attributes:
        stage: one of ``STAGE_NAMES``.
        t_start, t_end: the stage's span on the run's clock; an online event's report
            time (both).
        cycle: the cycle the stage belongs to (1, 2, ...).
        layer, head: the attention head (both -1: a global stage of a per-head
            detector; both None: a whole-model stage).
        onset: an online event's back-dated start time (None offline).
        step: the step of the observation that completed an online event.
        signal, value, reference, threshold: an online event's signal, its value
            then, the extremum it moved away from and the move that counts.
        provisional: an offline stage the run ended before closing (module
            docstring); always False for an online event.
        key: the key class the attention mass moved onto (a focus) or from (a
            dilution), measured over the move (``KEY_NAMES``); None for stages
            that are no attention move (condensation, liftings).
    """

    stage: str
    t_start: float
    t_end: float
    cycle: int
    layer: int | None = None
    head: int | None = None
    _: dataclasses.KW_ONLY
    onset: float | None = None
    step: int | None = None
    signal: str | None = None
    value: float | None = None
    reference: float | None = None
    threshold: float | None = None
    provisional: bool = False
    key: str | None = None

    def __post_init__(self):
        if self.stage not in ALL_NAMES:
            raise ValueError(f"stage name must be one of {ALL_NAMES}")
        if self.key is not None and self.key not in KEY_NAMES:
            raise ValueError(
                f"key must be None or one of {KEY_NAMES}, got {self.key!r}"
            )
        if not self.t_end >= self.t_start:
            raise ValueError(f"t_end {self.t_end} < t_start {self.t_start}")
        where = (self.layer, self.head)
        if (self.layer is None) != (self.head is None):
            raise ValueError(
                f"layer and head must both be None (a whole-model stage) or both "
                f"given, got {where}"
            )
        if self.layer is not None and (self.layer < 0 or self.head < 0):
            if where != (-1, -1):
                raise ValueError(
                    f"layer and head must both be >= 0, or both -1 (global), got "
                    f"{where}"
                )
        given = [getattr(self, k) is not None for k in _EVENT_FIELDS]
        if any(given) and not all(given):
            raise ValueError(
                f"an online event needs all of {_EVENT_FIELDS}, an offline stage "
                "none of them"
            )
        if self.is_event and (self.layer is None or self.t_end != self.t_start):
            raise ValueError(
                "an online event has a layer and head (-1 for a global one) and "
                "t_start = t_end, the time it was reported"
            )
        if self.is_event and self.provisional:
            raise ValueError("an online event is never provisional")

    @property
    def name(self) -> str:
        """The stage's name (``stage``; the attribute's older spelling)."""
        return self.stage

    @property
    def is_paper_stage(self) -> bool:
        """Whether this is one of the paper's stages (``STAGE_NAMES``), not another
        named move (``MOVE_NAMES``)."""
        return self.stage in STAGE_NAMES

    @property
    def is_event(self) -> bool:
        """Whether this is an online event (it has ``step``, ``onset``, ...)."""
        return self.step is not None

    def to_dict(self) -> dict[str, str | float | int]:
        """The JSON object its file holds: an events.jsonl line for an online
        event, a stages.json entry otherwise (module docstring)."""
        if self.is_event:
            return {
                "event": self.stage,
                "layer": int(self.layer),
                "head": int(self.head),
                "cycle": int(self.cycle),
                "step": int(self.step),
                "t": float(self.t_start),
                "t_onset": float(self.onset),
                "signal": self.signal,
                "value": float(self.value),
                "reference": float(self.reference),
                "threshold": float(self.threshold),
                "key": self.key,
            }
        out = {
            "stage": self.stage,
            "t_start": float(self.t_start),
            "t_end": float(self.t_end),
            "cycle": int(self.cycle),
        }
        if self.layer is not None:
            out |= {"layer": int(self.layer), "head": int(self.head)}
        if self.provisional:
            out["provisional"] = True
        if self.key is not None:
            out["key"] = self.key
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Stage:
        """The stage ``to_dict`` wrote (an events.jsonl line or a stages.json
        entry)."""
        if "event" in d:
            t = float(d["t"])
            return cls(
                d["event"],
                t,
                t,
                int(d["cycle"]),
                int(d["layer"]),
                int(d["head"]),
                onset=float(d["t_onset"]),
                step=int(d["step"]),
                signal=str(d["signal"]),
                value=float(d["value"]),
                reference=float(d["reference"]),
                threshold=float(d["threshold"]),
                key=d.get("key"),
            )
        layer, head = d.get("layer"), d.get("head")
        return cls(
            d["stage"],
            float(d["t_start"]),
            float(d["t_end"]),
            int(d["cycle"]),
            None if layer is None else int(layer),
            None if head is None else int(head),
            provisional=bool(d.get("provisional", False)),
            key=d.get("key"),
        )
