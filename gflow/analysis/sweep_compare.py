"""A sweep's members against a reference: errors, departure times, order, Richardson.

The order p is the slope of log error against log η over the members in the
asymptotic regime only. A member is left out of the fit (with its reason) when it
diverged, when the sharpness λ_max of the reference exceeds the optimizer's stability
bound c/η at some saved time (given ``stability`` = c), or when its distance to the
reference is above the departure threshold already at its first save after t = 0:
such a member is not a small-η perturbation of the reference, and one such member
can move the fitted slope far from the method's order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, MutableMapping
from typing import Any

import numpy as np
from jaxtyping import PRNGKeyArray

from gflow.analysis.compare import compare, fit_order, richardson
from gflow.analysis.sharpness import sharpness_along
from gflow.array_types import LossFn, Model, Observables
from gflow.dynamics.references.base import AbstractReference
from gflow.dynamics.sweep import SweepRun


@dataclasses.dataclass
class SweepComparison(MutableMapping):
    """A sweep's members against a reference (``compare_sweep``).

    Attributes:
        reference: the reference's name.
        threshold: the distance that defines a departure.
        order, intercept: the log-log fit of error against η over the members in
            it (None when fewer than two remain; ``order_reason`` says why).
        order_members: the indices of the members in the fit.
        order_reason: why there is no order, or None.
        excluded: member, lr and reason of each member left out of the fit.
        richardson: the two smallest η of the fit extrapolated to η→0.
        members: one record per member (lr, status, error, final_error,
            departure_time, in_order_fit, ...; a command adds its own measures).
        comparisons: member -> its ``Comparison`` with the reference.
        references: member -> the reference trajectory at its times.
        sharpness: (t, lambda_max) along the reference of the smallest η, or None.
        run: the SweepRun compared (set by ``gflow sweep``), or None.
        stability: the optimizer's stability constant c, or None.
        members_wall_s: the members' wall time (set by ``gflow sweep``), or None.

    Reads and updates as the mapping ``compare_sweep`` returned before
    (``result["members"]``, ``result.get("sharpness")``); a key that is not a
    field is refused, so a misspelt measure fails where it is written.
    """

    reference: str
    threshold: float
    order: float | None
    intercept: float | None
    order_members: list
    order_reason: str | None
    excluded: list
    richardson: dict
    members: list
    comparisons: dict
    references: dict
    sharpness: dict | None = None
    run: Any = None
    stability: float | None = None
    members_wall_s: float | None = None

    #: The measures a mapping shows even when None (the rest only once set).
    ALWAYS = frozenset({"order", "intercept", "order_reason"})

    def _shown(self) -> list[str]:
        return [
            f.name
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None or f.name in self.ALWAYS
        ]

    def __getitem__(self, key: str):
        if key not in self._shown():
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key: str, value) -> None:
        if key not in {f.name for f in dataclasses.fields(self)}:
            raise KeyError(f"{key!r} is not a measure of a SweepComparison")
        setattr(self, key, value)

    def __delitem__(self, key: str) -> None:
        raise TypeError("a SweepComparison's measures cannot be deleted")

    def __iter__(self) -> Iterator[str]:
        return iter(self._shown())

    def __len__(self) -> int:
        return len(self._shown())


def compare_sweep(
    run: SweepRun,
    reference: AbstractReference,
    loss_fn: LossFn,
    model: Model,
    *,
    threshold: float = 0.1,
    observables: Observables = None,
    stability: float | None = None,
    key: PRNGKeyArray | None = None,
) -> SweepComparison:
    """Compare every member of ``run`` with ``reference`` and fit the order.

    Args:
        run: a SweepRun.
        reference: a reference strategy (``FlowReference()``,
            ``ModifiedFlowReference()``, an optimizer ODE) with
            ``solve(loss_fn, model, times, lrs, observables)``.
        loss_fn, model: as given to ``run_sweep``.
        threshold: distance that defines the departure time.
        observables: recorded along the reference trajectories.
        stability: the optimizer's stability constant c (``optimizer.stability``:
            2 for GD); given, λ_max is tracked along the reference of the smallest η
            and members with λ_max > c/η at some saved time are left out of the fit.
        key: for the Lanczos starts of λ_max; needed with ``stability``.

    Returns:
        A ``SweepComparison``: ``members`` (lr, error = max distance over
        [0, t1], final_error,
        departure_time, status, diverged_step, first_rise_time, loss_rises,
        ``in_order_fit`` and, for a member left out, ``excluded``: why),
        ``order`` and ``intercept`` of the log-log fit over the members in it (None
        when fewer than two remain, ``order_reason`` then says why),
        ``order_members`` (their indices), ``excluded`` (member, lr, reason of
        each one left out), ``richardson`` (the two smallest η of the fit
        extrapolated to η→0), ``references`` and ``comparisons`` (per member), and
        with ``stability`` also ``sharpness`` (t, lambda_max).
    """
    if stability is not None and key is None:
        raise ValueError("compare_sweep: stability needs a key for λ_max (key=...)")
    # diverged members are not compared: their reference could itself blow up
    ok = [m for m in range(len(run.lrs)) if run.status(m) == "success"]
    solved = reference.solve(
        loss_fn, model, [run.t[m] for m in ok], run.lrs[ok], observables
    )
    refs = dict(zip(ok, solved))
    members, comparisons = [], {}
    for m in range(len(run.lrs)):
        rec = {"lr": float(run.lrs[m]), "status": run.status(m)}
        if run.first_rise_step is not None:
            rec["first_rise_time"] = run.first_rise_time(m)
            rec["loss_rises"] = int(run.rises[m])
        if m in refs:
            cmp = compare(run.member(m), refs[m], threshold=threshold)
            comparisons[m] = cmp
            rec["error"] = cmp["error"]
            rec["final_error"] = cmp["final_error"]
            rec["departure_time"] = cmp["departure_time"]
        else:
            rec["diverged_step"] = int(run.diverged_step[m])
            rec["diverged_time"] = float(run.diverged_step[m] * run.lrs[m])
            rec["error"] = rec["final_error"] = None
            rec["departure_time"] = rec["diverged_time"]
        members.append(rec)
    sharpness = None
    if stability is not None and refs:
        smallest = refs[min(refs, key=lambda m: run.lrs[m])]
        lam = sharpness_along(loss_fn, smallest, key=key)
        sharpness = {"t": smallest.t, "lambda_max": lam}
    excluded = []
    for m, rec in enumerate(members):
        reason = _exclusion(run, m, rec, threshold, stability, sharpness)
        rec["in_order_fit"] = reason is None
        if reason is not None:
            rec["excluded"] = reason
            excluded.append({"member": m, "lr": rec["lr"], "reason": reason})
    fit = [m for m, rec in enumerate(members) if rec["in_order_fit"]]
    order = intercept = reason = None
    if len(fit) < 2:
        reason = (
            f"{len(fit)} member(s) in the asymptotic regime, the fit needs two; "
            + "; ".join(f"η={e['lr']:g}: {e['reason']}" for e in excluded)
        )
    else:
        p, c = fit_order([run.lrs[m] for m in fit], [members[m]["error"] for m in fit])
        if np.isfinite(p):
            order, intercept = p, c
        else:
            reason = "the errors of the members in the fit are not positive"
    extrap = {"error": None, "times": 0}
    if order is not None:
        b, a = sorted(fit, key=lambda i: run.lrs[i])[:2]  # a: the larger of the two
        extrap = richardson(run.member(a), run.member(b), refs[b], order)
    return SweepComparison(
        reference=reference.name,
        threshold=threshold,
        order=order,
        intercept=intercept,
        order_members=fit,
        order_reason=reason,
        excluded=excluded,
        richardson=extrap,
        members=members,
        comparisons=comparisons,
        references=refs,
        sharpness=sharpness,
    )


def _exclusion(run, m, rec, threshold, stability, sharpness) -> str | None:
    """Why member m must stay out of the order fit (None: it belongs in it)."""
    if rec["status"] != "success":
        return f"diverged at t = {rec['diverged_time']:g}"
    if sharpness is not None:
        edge = stability / rec["lr"]
        t, lam = np.asarray(sharpness["t"]), np.asarray(sharpness["lambda_max"])
        over = lam > edge
        if over.any():
            i = int(np.argmax(over))
            return (
                f"past its edge of stability: λ_max of the reference {lam[i]:.3g} > "
                f"{stability:g}/η = {edge:.3g} at t = {t[i]:g}"
            )
    # large steps save the same time repeatedly (t = 0, 0, η, η, ...)
    dep, first = rec["departure_time"], np.min(run.t[m][run.t[m] > 0], initial=np.inf)
    if dep is not None and dep <= first:
        return (
            f"distance to the reference above the threshold {threshold:g} already "
            f"at its first save t = {dep:g}"
        )
    return None
