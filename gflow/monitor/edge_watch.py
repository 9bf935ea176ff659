"""The monitor's edge-of-stability event: the curvature along the optimizer's update
(``gflow.analysis.edge``) reaching the optimizer's own bound.

An observation that carries the edge signals (``edge_ratio`` = κ / (c/η), with
``edge_sharpness`` κ, ``edge_threshold`` c/η and ``edge_critical_step`` s_c)
completes an event when the ratio reaches 1 while the watch is armed; the watch
re-arms once the ratio has fallen below ``rearm`` (0.8), so a run that hovers at the
edge, as GD does there, reports its arrival once and each later return after a real
retreat. Events are dicts (``EDGE_EVENT`` fields), written to ``edge.jsonl``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: The signals an observation with the edge measurement carries.
EDGE_SIGNALS = ("edge_sharpness", "edge_threshold", "edge_ratio", "edge_critical_step")
EDGE_FILE = "edge.jsonl"


@dataclass
class EdgeWatch:
    """Streaming edge events (module docstring)."""

    rearm: float = 0.8
    events: list[dict] = field(default_factory=list)
    _armed: bool = True

    def update(self, step: int, t: float, values: dict) -> list[dict]:
        if "edge_ratio" not in values:
            return []
        ratio = float(np.asarray(values["edge_ratio"]))
        if not np.isfinite(ratio):
            return []
        if not self._armed:
            self._armed = ratio < self.rearm
            return []
        if ratio < 1.0:
            return []
        self._armed = False
        event = {
            "event": "edge_of_stability",
            "step": int(step),
            "t": float(t),
            "ratio": ratio,
            "sharpness": float(np.asarray(values["edge_sharpness"])),
            "threshold": float(np.asarray(values["edge_threshold"])),
            "critical_step": float(np.asarray(values["edge_critical_step"])),
        }
        self.events.append(event)
        return [event]
