"""A sweep's members against a reference: errors, departure times, order, Richardson."""

from __future__ import annotations

from gflow.analysis.compare import compare, fit_order, richardson
from gflow.array_types import LossFn, Model, Observables
from gflow.dynamics.references.base import AbstractReference
from gflow.dynamics.sweep import SweepRun


def compare_sweep(
    run: SweepRun,
    reference: AbstractReference,
    loss_fn: LossFn,
    model: Model,
    *,
    threshold: float = 0.1,
    observables: Observables = None,
) -> dict:
    """Compare every member of ``run`` with ``reference`` and fit the order.

    Args:
        run: a SweepRun.
        reference: a reference strategy (``FlowReference()``,
            ``ModifiedFlowReference()``, an optimizer ODE) with
            ``solve(loss_fn, model, times, lrs, observables)``.
        loss_fn, model: as given to ``run_sweep``.
        threshold: distance that defines the departure time.
        observables: recorded along the reference trajectories.

    Returns:
        dict with ``members`` (lr, error = max distance over [0, t1], final_error,
        departure_time, status, diverged_step, first_rise_time, loss_rises),
        ``order`` and ``intercept`` of the
        log-log fit over the members that succeeded, ``richardson`` (the two smallest η
        extrapolated to η→0), ``references`` and ``comparisons`` (per member).
    """
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
    order, intercept = fit_order(
        [members[i]["lr"] for i in ok], [members[i]["error"] for i in ok]
    )
    extrap = {"error": None, "times": 0}
    if len(ok) >= 2:
        small = sorted(ok, key=lambda i: run.lrs[i])[:2]
        b, a = small  # a: the larger of the two smallest step sizes
        extrap = richardson(run.member(a), run.member(b), refs[b], order)
    return {
        "reference": reference.name,
        "threshold": threshold,
        "order": order,
        "intercept": intercept,
        "richardson": extrap,
        "members": members,
        "comparisons": comparisons,
        "references": refs,
    }
