"""Solver cost per gradient evaluation against a bare jitted gradient (issue 5, item 3).

Bare cost is measured two ways: a jitted gradient called from Python (includes the
per-call dispatch a hand-written loop pays) and N gradients chained inside one jitted
``lax.fori_loop`` (pure compute). The solver's cost is its wall time over its
gradient evaluations on the default flow (t1 = 400, non-stiff: Tsit5 steps).
Writes results/overhead.json.
"""

from __future__ import annotations

import diffrax
import jax

from gflow import solve_flow
from gflow.analysis.hessian import flatten
from gflow.dynamics.solvers import StiffSwitch

from .common import default_problem, save, timed


def run(*, t1: float = 400.0, n: int = 2000, repeats: int = 3) -> dict:
    loss, model = default_problem()
    x0, unravel = flatten(model)
    grad = jax.jit(jax.grad(lambda x: loss(unravel(x))))
    grad(x0).block_until_ready()

    def python_loop():
        x = x0
        for _ in range(n):
            x = x - 1e-6 * grad(x)
        return x

    @jax.jit
    def fused(x):
        g = jax.grad(lambda z: loss(unravel(z)))
        return jax.lax.fori_loop(0, n, lambda i, z: z - 1e-6 * g(z), x)

    fused(x0).block_until_ready()
    _, t_py = timed(python_loop, repeats=repeats)
    _, t_fused = timed(lambda: fused(x0), repeats=repeats)
    rows = {"bare_python_call_us": 1e6 * t_py / n, "bare_fused_us": 1e6 * t_fused / n}
    for name, solver in [("tsit5", diffrax.Tsit5()), ("stiff_switch", StiffSwitch())]:

        def solve(solver=solver):
            return solve_flow(loss, model, t1=t1, solver=solver, progress=False)

        timed(solve)
        tr, wall = timed(solve, repeats=repeats)
        per = 1e6 * wall / tr.stats["grad_evals"]
        rows[name] = {
            "wall_s": wall,
            "grad_evals": tr.stats["grad_evals"],
            "us_per_grad_eval": per,
            "ratio_vs_fused": per / rows["bare_fused_us"],
            "ratio_vs_python_call": per / rows["bare_python_call_us"],
        }
        print(f"  {name}: {rows[name]}", flush=True)
    record = {"t1": t1, "n_bare": n, "rows": rows}
    save("overhead", record)
    return record
