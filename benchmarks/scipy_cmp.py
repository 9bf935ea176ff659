"""gflow against scipy.integrate.solve_ivp on one jitted gradient (issues 5 and 12).

Issue 12's target: gflow at least 10x faster than ``solve_ivp`` DOP853 at comparable
accuracy on the default flow to t1 = 300 at rtol 1e-8 (atol rtol/100 for both). Both
integrate the same float64 flow: scipy calls the same jitted gradient (and a jitted
dense Hessian as the Jacobian for the implicit methods); gflow runs ``solve_flow`` with
its default solver (AutoSwitch) unless ``solver`` is given. gflow's time is warm (the
solve is compiled by a first call, reported apart as ``compile_s``); scipy's has no
compile beyond the gradient's, done before timing; both are the minimum of
``repeats``. Errors: relative distance of the final parameters to a Dopri8 reference
at ``ref_rtol`` (1e-12 by default, cached in results/). Every row carries the
1-minute load average at which it was taken. Writes results/scipy_t<t1>.json.
"""

from __future__ import annotations

import time

import jax
import numpy as np
import scipy.integrate

from gflow.analysis import dense_hessian, flatten

from .common import default_problem, load1, rel_error, save, solve_to, timed
from .stiff import reference


def run(
    *,
    t1: float = 300.0,
    rtol: float = 1e-8,
    methods=("DOP853",),
    repeats: int = 2,
    solver=None,
    ref_rtol: float = 1e-12,
) -> dict:
    """``solver``: gflow's solver (default: ``solve_flow``'s own, AutoSwitch)."""
    loss, model = default_problem()
    x0, unravel = flatten(model)
    x_ref = reference(loss, model, t1, rtol=ref_rtol)
    grad = jax.jit(jax.grad(lambda x: loss(unravel(x))))
    hess = jax.jit(lambda x: dense_hessian(loss, unravel(x)))
    grad(x0).block_until_ready()
    counter = {"n": 0}

    def f(t, x):
        counter["n"] += 1
        return -np.asarray(grad(x))

    def jac(t, x):
        return -np.asarray(hess(x))

    implicit = ("LSODA", "BDF", "Radau")
    if any(m in implicit for m in methods):
        jac(0.0, np.asarray(x0))
    rows = {}
    for method in methods:
        load = load1()
        wall = np.inf
        for _ in range(repeats):  # min of repeats, as for gflow
            counter["n"] = 0
            start = time.perf_counter()
            sol = scipy.integrate.solve_ivp(
                f,
                (0.0, t1),
                np.asarray(x0),
                method=method,
                rtol=rtol,
                atol=rtol * 1e-2,
                **({"jac": jac} if method in implicit else {}),
            )
            wall = min(wall, time.perf_counter() - start)
        err = float(np.linalg.norm(sol.y[:, -1] - x_ref) / np.linalg.norm(x_ref))
        rows[method] = {
            "wall_s": wall,
            "grad_evals": counter["n"],
            "rel_error_final": err,
            "success": bool(sol.success),
            "load_1min": load,
        }
        print(f"  scipy {method}: {rows[method]}", flush=True)

    def solve(t1=t1):
        return solve_to(loss, model, t1=t1, solver=solver, rtol=rtol)

    # t1 is traced: a short solve compiles the same program, and its warm time is
    # subtracted from the first call's
    _, first = timed(lambda: solve(t1=1.0))
    _, short = timed(lambda: solve(t1=1.0))
    load = load1()
    tr, wall = timed(solve, repeats=repeats)
    err = rel_error(tr.final, x_ref)
    rows["gflow"] = {
        "wall_s": wall,
        "compile_s": max(first - short, 0.0),
        "grad_evals": tr.stats["grad_evals"],
        "rel_error_final": err,
        "solver": tr.info["solver"],
        "status": tr.status,
        "load_1min": load,
    }
    print(f"  gflow: {rows['gflow']}", flush=True)
    for m in methods:
        rows[m]["gflow_speedup"] = rows[m]["wall_s"] / wall
        rows[m]["gflow_as_accurate"] = err <= rows[m]["rel_error_final"]
    record = {"t1": t1, "rtol": rtol, "ref_rtol": ref_rtol, "solvers": rows}
    save(f"scipy_t{t1:g}", record)
    return record
