"""Comparing an optimizer run with a reference trajectory on the shared clock.

Both runs must hold parameter snapshots at the same times t (member times k·η and the
reference solved at exactly those times). Measures: parameter distance overall and per
block (W_E, W_P, W_A), loss gap, attention drift (total variation between the
population attention matrices at equal t), the departure time τ at which the distance
first exceeds a threshold, and the shift of stage times found by any stage detector.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float, Real

from gflow.array_types import RealVector
from gflow.dynamics.trajectory import Trajectory, parameter_distance
from gflow.problems.losses import population_attention


def departure_time(
    t: Real[ArrayLike, " n"] | Sequence[float],
    distance: Real[ArrayLike, " n"] | Sequence[float],
    threshold: float,
) -> float | None:
    """The first saved time at which ``distance`` exceeds ``threshold`` (None: never).

    A NaN distance (a diverged run) counts as exceeding it.
    """
    t, distance = np.asarray(t, float), np.asarray(distance, float)
    over = ~(distance <= threshold)
    return float(t[np.argmax(over)]) if over.any() else None


@eqx.filter_jit
def _attention_tv(snaps_a, snaps_b, pi):
    def tv(a, b):
        return 0.5 * jnp.sum(
            jnp.abs(population_attention(a, pi) - population_attention(b, pi)), -1
        )

    return jax.vmap(tv)(snaps_a, snaps_b)  # [n, d]


def attention_drift(
    a: Trajectory, b: Trajectory, pi: Real[ArrayLike, " d"]
) -> Float[np.ndarray, "n d"]:
    """Per-query total variation between two runs' attention, float [n, d]."""
    n = min(len(a), len(b))

    def head(x):
        return x[:n] if eqx.is_array(x) else x

    return np.asarray(
        _attention_tv(
            jax.tree.map(head, a.params), jax.tree.map(head, b.params), jnp.asarray(pi)
        )
    )


def stage_times(
    detected: Mapping[str, float | None] | Iterable[Any],
) -> dict[str, float | None]:
    """Stage name -> time, from a detector's output.

    Accepts a mapping name -> time, or a sequence of records with a ``name`` and one
    of ``time``, ``t``, ``start`` or ``t_start`` (attributes or keys).
    """
    if isinstance(detected, Mapping):
        return {str(k): (None if v is None else float(v)) for k, v in detected.items()}
    out = {}
    for rec in detected:
        get = rec.get if isinstance(rec, Mapping) else (lambda k, r=rec: getattr(r, k))
        name = get("name")
        for field in ("time", "t", "start", "t_start"):
            try:
                value = get(field)
            except AttributeError:
                continue
            if value is not None or field == "t_start":
                out[str(name)] = None if value is None else float(value)
                break
    return out


def stage_shifts(
    run: Trajectory, ref: Trajectory, detector: Callable
) -> dict[str, dict[str, float | None]]:
    """Per detected stage: its time in ``run``, in ``ref``, and the shift."""
    a, b = stage_times(detector(run)), stage_times(detector(ref))
    out = {}
    for name in dict.fromkeys([*b, *a]):
        ta, tb = a.get(name), b.get(name)
        shift = None if ta is None or tb is None else ta - tb
        out[name] = {"run": ta, "reference": tb, "shift": shift}
    return out


@dataclasses.dataclass(frozen=True)
class Comparison(Mapping):
    """A run against a reference at their common times (``compare``).

    Attributes:
        t: the common times [n].
        distance: name -> [n]: total, W_E, W_P, W_A parameter distances.
        loss_gap: the run's loss minus the reference's [n].
        error: the largest total distance (NaN if none is finite).
        final_error: the total distance at the last common time.
        departure_time: the first t with total distance above ``threshold``.
        threshold: that threshold.
        attention_tv: total-variation drift of the attention [n, d], if asked.
        stages: stage name -> run, reference and shift times, if asked.

    Reads as a mapping of the measures that are set (``cmp["error"]``,
    ``dict(cmp)``), as the dict that ``compare`` returned before.
    """

    t: ArrayLike
    distance: dict
    loss_gap: ArrayLike
    error: float
    final_error: float
    departure_time: float | None
    threshold: float
    attention_tv: ArrayLike | None = None
    stages: dict | None = None

    def _set(self) -> dict:
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None or f.name == "departure_time"
        }

    def __getitem__(self, key: str):
        return self._set()[key]

    def __iter__(self):
        return iter(self._set())

    def __len__(self) -> int:
        return len(self._set())


def compare(
    run: Trajectory,
    ref: Trajectory,
    *,
    threshold: float = 0.1,
    pi: Real[ArrayLike, " d"] | None = None,
    stage_detector: Callable | None = None,
) -> Comparison:
    """All comparison measures of ``run`` against ``ref`` at their common times.

    Args:
        run, ref: trajectories with parameter snapshots at the same times.
        threshold: the departure time is the first t with total distance above it.
        pi: the token distribution (for attention drift); None skips it.
        stage_detector: ``trajectory -> stages`` (see ``stage_times``); None skips.

    Returns:
        A ``Comparison`` (``t``, ``distance``, ``loss_gap``, ``error``,
        ``final_error``, ``departure_time``, ``threshold`` and where asked
        ``attention_tv`` and ``stages``), which also reads as the dict of those
        that are set.
    """
    dist = parameter_distance(run, ref)
    n = len(dist["t"])
    total = dist["total"]
    return Comparison(
        t=dist["t"],
        distance={k: v for k, v in dist.items() if k != "t"},
        loss_gap=np.asarray(run.metrics["loss"][:n]) - ref.metrics["loss"][:n],
        error=float(np.nanmax(total)) if np.isfinite(total).any() else np.nan,
        final_error=float(total[-1]),
        departure_time=departure_time(dist["t"], total, threshold),
        threshold=threshold,
        attention_tv=None if pi is None else attention_drift(run, ref, pi),
        stages=None
        if stage_detector is None
        else stage_shifts(run, ref, stage_detector),
    )


def fit_order(
    lrs: RealVector, errors: Real[ArrayLike, " _M"] | Sequence[float | None]
) -> tuple[float, float]:
    """Least-squares fit log error = p log η + c over finite positive errors: (p, c)."""
    lrs, errors = np.asarray(lrs, float), np.asarray(errors, float)
    ok = np.isfinite(errors) & (errors > 0)
    if ok.sum() < 2:
        return float("nan"), float("nan")
    p, c = np.polyfit(np.log(lrs[ok]), np.log(errors[ok]), 1)
    return float(p), float(c)


def richardson(a: Trajectory, b: Trajectory, ref: Trajectory, order: float) -> dict:
    """Richardson extrapolation η→0 of two runs (steps η_a > η_b) at common times.

    θ₀ ≈ θ_b + (θ_b − θ_a) / ((η_a/η_b)^p − 1), with p = ``order``. Returns the
    extrapolated run's maximum distance to ``ref`` and the common times used.
    """
    ratio = a.info["lr"] / b.info["lr"]
    common = [
        (i, j, k)
        for i, ti in enumerate(a.t)
        for j in np.flatnonzero(np.isclose(b.t, ti, rtol=1e-9, atol=1e-12))
        for k in np.flatnonzero(np.isclose(ref.t, ti, rtol=1e-9, atol=1e-12))[:1]
    ]
    if not common or not np.isfinite(order):
        return {"error": None, "times": 0}
    ia, ib, ir = (np.array(x) for x in zip(*common))
    w = 1.0 / (ratio**order - 1.0)

    def pick(traj, idx):
        return jax.tree.map(lambda x: x[idx] if eqx.is_array(x) else x, traj.params)

    pa, pb, pr = pick(a, ia), pick(b, ib), pick(ref, ir)
    extrap = jax.tree.map(
        lambda x, y: y + w * (y - x) if eqx.is_array(x) else x, pa, pb
    )
    ext = Trajectory(
        t=a.t[ia], metrics={"loss": a.metrics["loss"][ia]}, final=None, params=extrap
    )
    rt = Trajectory(
        t=a.t[ia], metrics={"loss": ref.metrics["loss"][ir]}, final=None, params=pr
    )
    total = parameter_distance(ext, rt)["total"]
    return {
        "error": float(np.max(total)),
        "times": len(ia),
        "lrs": [a.info["lr"], b.info["lr"]],
    }
