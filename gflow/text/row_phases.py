"""What each tracked query's attention row does over a run (issue 16, point 3).

A tracked query's attention row A_q(t) [d] (its attention over key types) focuses
when its largest entry rises and dilutes when it falls. ``row_phases`` reads the
moves of the largest entry max_k A_q(t)_k with the stage rules' ``moves``
(``StageDetector``: a move between two turning points of at least 20% of the
signal's range and 0.1 in attention; it spans its 5% to 95% points), and names, for
each move, the key the row focuses on (the largest key at the move's end) or
dilutes from (the largest key at its start). The paper's rows read this way: e.g.
WikiText's "continue": dilute, focus on whitespace, dilute, focus on itself.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float

from gflow.analysis.stages import StageDetector


def row_phases(
    t: Float[np.ndarray, " n"],
    row: Float[np.ndarray, "n d"],
    tokens: list[str] | tuple[str, ...],
    query: int,
    *,
    detector: StageDetector | None = None,
) -> list[dict]:
    """The focus and dilution moves of one attention row, in time order.

    Args:
        t: saved times [n].
        row: the query's attention over the d key types at each time [n, d].
        tokens: the d key types' strings.
        query: the query's own id (a key equal to it is reported as "itself").
        detector: the move thresholds (default ``StageDetector()``).

    Returns:
        One dict per move: ``phase`` ("focus" or "dilution"), ``t_start``, ``t_end``,
        ``key`` (the key focused on, or diluted from), ``self`` (whether that key is
        the query itself), ``mass_before`` (the largest entry at the save before the
        move's 5% point, so that a move within one save interval shows its whole
        size) and ``mass_after`` (at its 95% point).
    """
    t, row = np.asarray(t, float), np.asarray(row, float)
    if row.ndim != 2 or row.shape[0] != t.size:
        raise ValueError(f"row must be [n, d] with n = {t.size}, got {row.shape}")
    if row.shape[1] != len(tokens):
        raise ValueError(f"{len(tokens)} tokens for {row.shape[1]} key types")
    detector = StageDetector() if detector is None else detector
    ok = np.all(np.isfinite(row), axis=1)  # saves after a divergence are NaN
    t, row = t[ok], row[ok]
    if t.size < 2:
        return []
    peak, top = row.max(axis=1), row.argmax(axis=1)
    out = []
    for sign, phase in ((+1, "focus"), (-1, "dilution")):
        for t0, t1, _ in detector.moves(t, peak, sign=sign):
            i0, i1 = int(np.searchsorted(t, t0)), int(np.searchsorted(t, t1))
            k = int(top[i1] if phase == "focus" else top[i0])
            out.append(
                {
                    "phase": phase,
                    "t_start": float(t0),
                    "t_end": float(t1),
                    "key": tokens[k],
                    "self": k == query,
                    "mass_before": float(peak[max(i0 - 1, 0)]),  # before the 5%
                    "mass_after": float(peak[i1]),
                }
            )
    return sorted(out, key=lambda p: p["t_start"])


def describe(phases: list[dict]) -> str:
    """The phases as one line: "focus on '▁' [12, 40]; dilution from ... ; ..."."""
    if not phases:
        return "no move"
    parts = []
    for p in phases:
        what = "itself" if p["self"] else repr(p["key"])
        word = "on" if p["phase"] == "focus" else "from"
        parts.append(
            f"{p['phase']} {word} {what} [{p['t_start']:.4g}, {p['t_end']:.4g}] "
            f"({p['mass_before']:.2f} → {p['mass_after']:.2f})"
        )
    return "; ".join(parts)
