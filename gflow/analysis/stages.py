"""Stage detection: Condensation → Focus → Dilution → Asymmetry lifting (MODEL.md §6).

``detect_stages(trajectory)`` reads the observables that ``StageObservables`` records
(and that every run records: the loss) and returns the stages in time order. Every
rule is a *move* of one scalar signal: a rise or fall between two significant turning
points (a zigzag with a relative threshold), and a stage spans the move from the time
the signal has covered ``edge`` (5%) of it to the time it has covered 95%. The
thresholds are the fields of a ``StageDetector``; ``detect_stages`` uses the defaults.

Every attention rule reads an *excess*: the attention mass on a key class minus
what the attention rows at init give it (π: uniform attention over the stationary
keys), so a focus is a move above that baseline, not a level; it counts when it
spans ``margin`` (docs/stage_rules.md, the same rules per head and online).

Cycle 1 (the numbers they give are in docs/markov_cycle.md):

- condensation: the loss falls from its initial value onto the unigram plateau H(π);
  it starts at t0 (W_E and W_P grow from the first instant, the loss lags) and ends
  when L - H(π) has fallen to 5% of its initial value.
- focus (key ``top``): the first rise of the π-weighted excess on the most frequent
  token, Σ_q π_q (A_q,top - π_top), by ``margin`` to at least ``margin``; defined
  only where that token is at least ``min_dominance`` times as frequent as the
  next (not on a uniform π: the rule and the stages after it then report
  nothing, with a warning), and reported only when the loss falls
  ``min_information`` below H(π) (``unigram_gap``, where recorded) at some time.
- dilution (key ``top``): the first fall of the low-frequency queries' excess on
  the most frequent token after focus has started.
- asymmetry_lifting: the growth of σ₂(W_E) after focus has started; it starts once
  ln σ₂ has risen by ln 2 above its minimum and ends when its growth rate has fallen
  to a quarter of its peak for good (σ₃ of the default flow grows in two phases with
  a lull between them, near t = 3000; the lifting of cycle 2 spans both).

Cycle k ≥ 2 (the next cycle opens once σ_k(W_E) has grown):

- focus (key ``self``): a rise of the low-frequency queries' π-weighted excess on
  themselves, Σ_q w_q (A_qq - π_q);
- dilution (key ``top``): a fall of the most frequent query's excess on itself;
- asymmetry_lifting: the growth of σ_{k+1}(W_E), as above.

Besides the paper's stages, the first fall of the attention entropy after
condensation (the rule "focus" had before it named its key) is reported as the move
``entropy_fall``, with the key class whose excess rose most over it (``top``,
``self`` or ``diffuse``); it is never counted as a paper stage.

A stage still under way at the end of the trajectory ends at the last saved time.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence

import numpy as np
from jaxtyping import ArrayLike, Real

from gflow.analysis.key_classes import KEY_CLASSES, moved_onto
from gflow.analysis.stage import ALL_NAMES, STAGE_NAMES, Stage  # noqa: F401
from gflow.array_types import RealVector
from gflow.dynamics.trajectory import Trajectory


def _zigzag(x: np.ndarray, thr: np.ndarray) -> tuple[list[int], int]:
    """The zigzag's points and how many of them are fixed (``turning_points``).

    ``thr[i]`` is the threshold at index i. A turning point is confirmed at the first
    later index j with ∣x[j] - x[point]∣ ≥ thr[j], so the confirmed points up to j
    depend on x[:j+1] only. Returns the points (index 0, the confirmed turning
    points, the running extremum and the last index) and the number of leading
    points that are fixed: index 0 and the confirmed ones.
    """
    points = [0]
    ext, direction = 0, 0  # index of the running extremum, +1 rising / -1 falling
    for i in range(1, x.size):
        if direction >= 0 and x[i] > x[ext] or direction <= 0 and x[i] < x[ext]:
            if direction == 0 and abs(x[i] - x[0]) < thr[i]:
                continue
            if direction == 0:
                direction = 1 if x[i] > x[0] else -1
            ext = i
        elif direction != 0 and abs(x[i] - x[ext]) >= thr[i]:
            points.append(ext)
            direction, ext = -direction, i
    fixed = len(points)
    if ext != points[-1]:
        points.append(ext)
    if points[-1] != x.size - 1:
        points.append(x.size - 1)
    return points, fixed


def turning_points(
    x: RealVector, threshold: float | Real[ArrayLike, " n"]
) -> list[int]:
    """Indices of the significant extrema of ``x`` (a zigzag filter).

    A turning point is confirmed once ``x`` has moved ``threshold`` away from it (a
    threshold per index may be given: the one at the index that confirms it); the
    first and the last index are always included, so consecutive points alternate
    between rises and falls of at least ``threshold`` (except possibly the last one).
    Causal: the points confirmed by index j are the same for every longer ``x``.
    """
    x = np.asarray(x, dtype=float)
    thr = np.broadcast_to(np.asarray(threshold, dtype=float), x.shape)
    return _zigzag(x, thr)[0]


def _first(candidates):
    return candidates[0] if candidates else None


def _sorted(stages: list[Stage]) -> list[Stage]:
    """Stages by start time, then their place in a cycle (other moves last)."""
    return sorted(stages, key=lambda s: (s.t_start, ALL_NAMES.index(s.stage)))


def has_frequent_token(shares, min_dominance: float, who: str) -> bool:
    """Whether the most frequent token of ``shares`` (π, or token counts) is at
    least ``min_dominance`` times as frequent as the next one; when it is not, the
    paper's cycle-1 focus (a move onto that token) is not defined, and a warning
    says that ``who`` reports none."""
    shares = np.sort(np.asarray(shares, float).ravel())[::-1]
    if shares.size < 2 or shares[1] <= 0:
        return True
    ratio = shares[0] / shares[1]
    if ratio >= min_dominance:
        return True
    warnings.warn(
        f"{who}: no most frequent token (top/second = {ratio:.3g} < min_dominance "
        f"{min_dominance:g}): the paper's cycle-1 focus onto it, and the stages "
        "after it, are not reported",
        stacklevel=3,
    )
    return False


@dataclasses.dataclass(frozen=True)
class StageDetector:
    """The stage rules with their thresholds (module docstring; docs/markov_cycle.md).

    Attributes:
        edge: fraction of a move that marks its start (and 1 - edge its end).
        min_move: a move counts when it spans at least this fraction of the signal's
            range ...
        min_amplitude: ... and at least this much in absolute terms (attention
            weights, nats).
        growth_start: growth of ln σ above its minimum that starts an
            asymmetry-lifting stage.
        min_growth: a singular value must grow by at least this factor to open a
            stage.
        margin: the paper's focus and dilution, and every other attention move,
            count when the excess mass on their key class (over what uniform
            causal attention gives it) moves by at least this much (attention
            weight); a move onto no class by this much is ``diffuse``.
        min_dominance: the paper's cycle-1 focus is defined only when the most
            frequent token is at least this many times as frequent as the next.
        min_information: the paper's stages are reported only in a run whose loss
            falls at least this far (nats) below the unigram loss (``unigram_gap``,
            where recorded): a run in which attention carries information about
            the next token.
        information_saves: ... at this many consecutive saved times: one dip of
            a small probe's noisy loss below the unigram loss is not information
            (on i.i.d. tokens a 32-sequence probe dipped to -0.023 nats once).
    """

    edge: float = 0.05
    min_move: float = 0.2
    min_amplitude: float = 0.1
    growth_start: float = float(np.log(2.0))
    min_growth: float = 4.0
    margin: float = 0.05
    min_dominance: float = 1.25
    min_information: float = 0.02
    information_saves: int = 2

    def margined(self) -> StageDetector:
        """These thresholds with ``min_amplitude`` = ``margin``: the moves of the
        key-class excess signals."""
        return dataclasses.replace(self, min_amplitude=self.margin)

    def __post_init__(self):
        if not 0 < self.edge < 0.5:
            raise ValueError(f"edge must lie in (0, 0.5), got {self.edge}")
        if not 0 < self.min_move <= 1:
            raise ValueError(f"min_move must lie in (0, 1], got {self.min_move}")
        if not self.min_amplitude >= 0:
            raise ValueError(f"min_amplitude must be >= 0, got {self.min_amplitude}")
        if not self.growth_start > 0:
            raise ValueError(f"growth_start must be > 0, got {self.growth_start}")
        if not self.min_growth > 1:
            raise ValueError(f"min_growth must be > 1, got {self.min_growth}")
        if not self.margin > 0:
            raise ValueError(f"margin must be > 0, got {self.margin}")
        if not self.min_dominance >= 1:
            raise ValueError(f"min_dominance must be >= 1, got {self.min_dominance}")
        if (
            isinstance(self.information_saves, bool)
            or not isinstance(self.information_saves, int)
            or self.information_saves < 1
        ):
            raise ValueError(
                "information_saves must be a positive integer, got "
                f"{self.information_saves!r}"
            )
        if not self.min_information >= 0:
            raise ValueError(
                f"min_information must be >= 0, got {self.min_information}"
            )

    def rises_above(
        self,
        t: Real[ArrayLike, " n"],
        excess: Real[ArrayLike, " n"],
        *,
        window: tuple[float, float] = (-np.inf, np.inf),
    ) -> list[tuple[float, float, float, bool]]:
        """The rises of an excess signal by ``margin`` (``closed_moves`` with
        ``min_amplitude = margin``) that end at least ``margin`` above zero, the
        uniform baseline: a move onto a key class, not a recovery from below."""
        t, excess = np.asarray(t, float), np.asarray(excess, float)
        found = self.margined().closed_moves(t, excess, sign=+1, window=window)
        return [
            m
            for m in found
            if float(np.max(excess[(t >= m[0]) & (t <= m[1])])) >= self.margin
        ]

    def informative(self, metrics) -> bool:
        """Whether the run's attention carries information about the next token:
        its ``unigram_gap`` (loss minus the unigram loss) is at least
        ``min_information`` below zero at ``information_saves`` consecutive
        saved times; True where the run does not record it (the gate cannot be
        read)."""
        if "unigram_gap" not in metrics:
            return True
        gap = np.asarray(metrics["unigram_gap"], float)
        return self.informed_from(np.arange(gap.size), gap) < np.inf

    def informed_from(
        self, t: Real[ArrayLike, " n"], gap: Real[ArrayLike, " n"]
    ) -> float:
        """Where the gate of ``informative`` opens: the time ``t`` of the
        ``information_saves``-th consecutive save with ``gap`` at least
        ``min_information`` below zero (inf when it never does)."""
        run = 0
        for ti, g in zip(np.asarray(t, float), np.asarray(gap, float)):
            run = run + 1 if g <= -self.min_information else 0
            if run >= self.information_saves:
                return float(ti)
        return np.inf

    def moves(
        self,
        t: Real[ArrayLike, " n"] | Sequence[float],
        x: Real[ArrayLike, " n"] | Sequence[float],
        *,
        sign: int,
        window: tuple[float, float] = (-np.inf, np.inf),
    ) -> list[tuple[float, float, float]]:
        """The rises (``sign=+1``) or falls (``-1``) of ``x`` inside a time window.

        Returns a list of (t_start, t_end, amplitude): the times at which the signal has
        covered ``edge`` and 1 - ``edge`` of a move between two turning points. A move
        counts when it spans ``min_move`` of the signal's range so far (from the
        window's start to the index that confirms its end) and at least
        ``min_amplitude``.
        """
        return [m[:3] for m in self.closed_moves(t, x, sign=sign, window=window)]

    def closed_moves(
        self,
        t: Real[ArrayLike, " n"] | Sequence[float],
        x: Real[ArrayLike, " n"] | Sequence[float],
        *,
        sign: int,
        window: tuple[float, float] = (-np.inf, np.inf),
        closed_end: bool = False,
    ) -> list[tuple[float, float, float, bool]]:
        """``moves`` with a fourth entry: whether the move is closed.

        A move is closed when a reversal has confirmed its end turning point, or when
        the window's end is final (``closed_end``: a fixed time inside the data, so
        that every point of the window is known). A closed move is the same on every
        longer run; an open one ends at the running extremum, which a longer run can
        move.
        """
        t, x = np.asarray(t, float), np.asarray(x, float)
        keep = (t >= window[0]) & (t <= window[1])
        t, x = t[keep], x[keep]
        if t.size < 2:
            return []
        if not float(np.max(x) - np.min(x)) > 0:
            return []
        # the threshold at each index from the range seen so far: causal
        span = np.maximum.accumulate(x) - np.minimum.accumulate(x)
        thr = np.maximum(self.min_move * span, self.min_amplitude)
        pts, fixed = _zigzag(x, thr)
        out = []
        for n, (a, b) in enumerate(zip(pts[:-1], pts[1:])):
            amp = x[b] - x[a]
            if np.sign(amp) != sign or abs(amp) < thr[b]:
                continue
            seg = sign * (x[a : b + 1] - x[a]) / abs(amp)  # 0 -> 1 along the move
            i0 = a + int(np.argmax(seg >= self.edge))
            i1 = a + int(np.argmax(seg >= 1 - self.edge))
            closed = closed_end or n + 1 < fixed
            out.append((float(t[i0]), float(t[i1]), float(abs(amp)), bool(closed)))
        return out

    def growth(
        self,
        t: Real[ArrayLike, " n"] | Sequence[float],
        sv: Real[ArrayLike, " n"] | Sequence[float],
        *,
        after: float = -np.inf,
    ) -> tuple[float, float] | None:
        """The growth of one singular value: (t_start, t_end) or None.

        Starts once ln σ exceeds its minimum (after ``after``) by ln 2 and ends when the
        growth rate d ln σ/dt, past its peak, falls below a quarter of the peak for
        good (a lull after which the rate climbs back above a quarter of the peak does
        not end it), or at the last time. None when σ grows by less than
        ``min_growth``.
        """
        found = self.closed_growth(t, sv, after=after)
        return None if found is None else found[:2]

    def closed_growth(
        self,
        t: Real[ArrayLike, " n"] | Sequence[float],
        sv: Real[ArrayLike, " n"] | Sequence[float],
        *,
        after: float = -np.inf,
        next_sv: Real[ArrayLike, " n"] | Sequence[float] | None = None,
    ) -> tuple[float, float, bool] | None:
        """``growth`` with a third entry: whether the growth is closed.

        "For good" needs the future: a lull may be followed by more growth (σ₃ of
        the default flow pauses from t ≈ 1440 to 4500). The growth is closed once
        the next singular value ``next_sv`` has grown by ln 2 (``growth_start``)
        above its minimum since the end found so far: the next escape has begun.
        Its end is then the one found on the data up to that point, so it is the
        same on every longer run. Without ``next_sv``, or before that, the growth is
        open and ends as ``growth`` says on the whole run.
        """
        t, logs = (
            np.asarray(t, float),
            np.log(np.maximum(np.asarray(sv, float), 1e-300)),
        )
        # σ read only up to its first value that is not finite (a run that
        # diverged): what follows is not a singular value
        bad = np.flatnonzero(~np.isfinite(logs))
        n_ok = int(bad[0]) if bad.size else logs.size
        idx = np.flatnonzero(t[:n_ok] >= after)
        if idx.size < 3:
            return None
        t, logs = t[idx], logs[idx]
        # the first growth by min_growth above the minimum before it: causal
        low = np.minimum.accumulate(logs)
        big = np.flatnonzero(logs - low >= np.log(self.min_growth))
        if big.size == 0:
            return None
        imin = int(np.argmin(logs[: big[0] + 1]))
        i0 = imin + int(np.argmax(logs[imin:] - logs[imin] >= self.growth_start))
        rate = np.gradient(logs, t)
        nxt = None
        if next_sv is not None:
            nxt = np.log(np.maximum(np.asarray(next_sv, float)[idx], 1e-300))
        # e = the last index so far with a rate of at least a quarter of the peak so
        # far (the growth's end on the data up to j); rate[j] is final for j < n - 1
        peak, e, since = rate[i0], i0, np.inf
        last = t.size - 1
        for j in range(i0, last):
            peak = max(peak, rate[j])
            if rate[j] >= 0.25 * peak:
                e, since = j, np.inf
            elif nxt is not None and j >= big[0]:
                since = min(since, nxt[j])
                if nxt[j] - since >= self.growth_start:
                    return float(t[i0]), float(t[min(e + 1, last)]), True
        ipeak = i0 + int(np.argmax(rate[i0:]))
        fast = np.flatnonzero(rate[ipeak:] >= 0.25 * rate[ipeak])
        i1 = min(ipeak + int(fast[-1]) + 1, last)
        return float(t[i0]), float(t[i1]), False

    def detect(
        self, trajectory: Trajectory, *, pi: RealVector | None = None
    ) -> list[Stage]:
        """The stages of a Markov population run, in time order (rules: module
        docstring).

        Args:
            trajectory: a Trajectory whose metrics hold ``loss``, ``attention_entropy``,
                ``attention`` [n, d, d], ``attention_on_top`` [n, d] and ``sv_W_E``
                [n, k] (``StageObservables``); ``unigram_gap`` is used when present.
            pi: the stationary distribution [d]; default: the attention rows at the
                first saved time, which equal π while W_A is at its small initial
                value.
        """
        m = trajectory.metrics
        need = ("attention_entropy", "attention", "attention_on_top", "sv_W_E")
        missing = [k for k in need if k not in m]
        if missing:
            raise ValueError(
                f"detect_stages needs the metrics {missing}; record them with "
                "observables=StageObservables(chain)"
            )
        t = np.asarray(trajectory.t, float)
        attn = np.asarray(m["attention"], float)  # [n, d, d]
        sv = np.asarray(m["sv_W_E"], float)  # [n, k]
        pi = attn[0].mean(axis=0) if pi is None else np.asarray(pi, float)
        top = int(np.argmax(pi))
        low = np.arange(pi.size) != top
        stages: list[Stage] = []

        def add(name, found, cycle, closed, key=None):
            stages.append(
                Stage(name, found[0], found[1], cycle, provisional=not closed, key=key)
            )

        loss = np.asarray(m["loss"], float)
        gap = np.asarray(m["unigram_gap"], float) if "unigram_gap" in m else None
        cond = None
        if gap is not None and gap[0] > 0 and np.any(gap <= self.edge * gap[0]):
            # the first time the gap is down to edge of its start: causal
            t_c = float(t[int(np.argmax(gap <= self.edge * gap[0]))])
            cond = (float(t[0]), t_c, True)
        elif gap is None and loss[0] - loss.min() > 0:
            # measured from the run's lowest loss, which a longer run can lower
            drop = loss - loss.min()
            i = int(np.argmax(drop <= self.edge * drop[0]))
            cond = (float(t[0]), float(t[i]), False)
        if cond is not None:
            add("condensation", cond, 1, cond[2])
        after, known = (cond[1], cond[2]) if cond else (float(t[0]), True)

        ent = np.asarray(m["attention_entropy"], float)
        # the excess over what uniform attention gives (π: the attention rows at
        # init), by query: on the top token, and each query on itself
        on_top_excess = attn[:, :, top] - pi[top]  # [n, d]
        self_excess = np.einsum("nii->ni", attn) - pi  # [n, d]
        w = pi[low] / pi[low].sum()
        moves = self.margined()
        fall = _first(self.closed_moves(t, ent, sign=-1, window=(after, np.inf)))
        if fall is not None:  # the old focus rule, named by where the mass went
            i0, i1 = np.searchsorted(t, fall[0]), np.searchsorted(t, fall[1])
            ex = np.stack(
                [on_top_excess @ pi, self_excess[:, low] @ pi[low]]
                + [np.zeros_like(t)] * (len(KEY_CLASSES) - 2),
                axis=1,
            )
            key = moved_onto(ex[i0], ex[i1], self.margin)
            add("entropy_fall", fall, 1, known and fall[3], key=key)
        if not has_frequent_token(pi, self.min_dominance, "detect_stages"):
            return _sorted(stages)
        if not self.informative(m):
            return _sorted(stages)
        # cycle 1: the π-weighted excess on the top token rises (focus) ...
        focus = _first(self.rises_above(t, on_top_excess @ pi))
        if focus is None:
            return _sorted(stages)
        known = focus[3]
        add("focus", focus, 1, known, key="top")
        lift = None
        if sv.shape[1] > 1:
            nxt = sv[:, 2] if sv.shape[1] > 2 else None
            lift = self.closed_growth(t, sv[:, 1], after=focus[0], next_sv=nxt)
        end = lift[1] if lift is not None else np.inf
        closed_end = lift is not None and lift[2] and known
        # ... and the low-frequency queries' excess on it falls back (dilution)
        dil = _first(
            moves.closed_moves(
                t,
                on_top_excess[:, low] @ w,
                sign=-1,
                window=(focus[0], end),
                closed_end=closed_end,
            )
        )
        if dil is not None:
            add("dilution", dil, 1, known and dil[3], key="top")
        low_self = self_excess[:, low] @ w  # low queries on themselves
        cycle = 1
        while lift is not None:
            known = known and lift[2]
            add("asymmetry_lifting", lift, cycle, known)
            cycle += 1
            nxt = None
            if cycle < sv.shape[1]:
                after_nxt = sv[:, cycle + 1] if cycle + 1 < sv.shape[1] else None
                nxt = self.closed_growth(
                    t, sv[:, cycle], after=lift[1], next_sv=after_nxt
                )
            window = (lift[1], nxt[1] if nxt is not None else np.inf)
            closed_end = nxt is not None and nxt[2] and known
            for name, signal, sign, key in (
                ("focus", low_self, +1, "self"),
                ("dilution", on_top_excess[:, top], -1, "top"),
            ):
                found = _first(
                    moves.closed_moves(
                        t, signal, sign=sign, window=window, closed_end=closed_end
                    )
                )
                if found is not None:
                    add(name, found, cycle, known and found[3], key=key)
            lift = nxt
        return _sorted(stages)


def detect_stages(
    trajectory: Trajectory,
    *,
    pi: RealVector | None = None,
    detector: StageDetector | None = None,
) -> list[Stage]:
    """The stages of a Markov population run, in time order (rules: module docstring).

    Args:
        trajectory: a Trajectory whose metrics hold ``loss``, ``attention_entropy``,
            ``attention`` [n, d, d], ``attention_on_top`` [n, d] and ``sv_W_E``
            [n, k] (``StageObservables``); ``unigram_gap`` is used when present.
        pi: the stationary distribution [d]; default: the attention rows at the first
            saved time, which equal π while W_A is at its small initial value.
        detector: the thresholds (default ``StageDetector()``).
    """
    detector = StageDetector() if detector is None else detector
    return detector.detect(trajectory, pi=pi)
