"""gflow against scipy.integrate.solve_ivp on one jitted gradient (issue 5, item 3).

The same flow (default problem), the same rtol/atol, the same float64 jitted
gradient (and jitted dense Hessian as the Jacobian for the implicit methods); errors
of the final parameters against a Dopri8 rtol-1e-11 reference. Writes
results/scipy.json.
"""

from __future__ import annotations

import time

import jax
import numpy as np
import scipy.integrate

from gflow.analysis.hessian import dense_hessian, flatten

from .common import default_problem, rel_error, save, solve_to, timed
from .stiff import reference


def run(
    *,
    t1: float = 400.0,
    rtol: float = 1e-6,
    methods=("DOP853", "RK45", "LSODA"),
    repeats: int = 2,
    solver=None,
) -> dict:
    """``solver``: gflow's solver (default: ``solve_flow``'s, Tsit5)."""
    loss, model = default_problem()
    x0, unravel = flatten(model)
    x_ref = reference(loss, model, t1)
    grad = jax.jit(jax.grad(lambda x: loss(unravel(x))))
    hess = jax.jit(lambda x: dense_hessian(loss, unravel(x)))
    grad(x0).block_until_ready()
    counter = {"n": 0}

    def f(t, x):
        counter["n"] += 1
        return -np.asarray(grad(x))

    def jac(t, x):
        return -np.asarray(hess(x))

    jac(0.0, np.asarray(x0))
    rows = {}
    for method in methods:
        counter["n"] = 0
        start = time.perf_counter()
        sol = scipy.integrate.solve_ivp(
            f,
            (0.0, t1),
            np.asarray(x0),
            method=method,
            rtol=rtol,
            atol=rtol * 1e-2,
            jac=jac if method in ("LSODA", "BDF", "Radau") else None,
        )
        wall = time.perf_counter() - start
        err = float(np.linalg.norm(sol.y[:, -1] - x_ref) / np.linalg.norm(x_ref))
        rows[method] = {
            "wall_s": wall,
            "grad_evals": counter["n"],
            "rel_error_final": err,
            "success": bool(sol.success),
        }
        print(f"  scipy {method}: {rows[method]}", flush=True)

    def solve():
        return solve_to(loss, model, t1=t1, solver=solver, rtol=rtol)

    timed(solve)
    tr, wall = timed(solve, repeats=repeats)
    err = rel_error(tr.final, x_ref)
    rows["gflow"] = {
        "wall_s": wall,
        "grad_evals": tr.stats["grad_evals"],
        "rel_error_final": err,
        "solver": tr.info["solver"],
    }
    print(f"  gflow: {rows['gflow']}", flush=True)
    for m in methods:
        rows[m]["gflow_speedup"] = rows[m]["wall_s"] / wall
        rows[m]["gflow_as_accurate"] = err <= rows[m]["rel_error_final"]
    record = {"t1": t1, "rtol": rtol, "solvers": rows}
    save(f"scipy_t{t1:g}", record)
    return record
