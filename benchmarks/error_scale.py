"""StiffSwitch's ``stiff_error_scale`` on the default flow to t = 3000 at rtol 1e-6.

Final-parameter error against the cached Dopri8 reference (run ``--only stiff``
first), gradient evaluations and warm wall time for each scale; the evidence for the
default of 100. Writes results/error_scale.json.
"""

from __future__ import annotations

from gflow.dynamics.solvers import StiffSwitch

from .common import default_problem, rel_error, save, solve_to, timed
from .stiff import reference


def run(*, t1: float = 3000.0, rtol: float = 1e-6, scales=(1.0, 30.0, 100.0)) -> dict:
    loss, model = default_problem()
    x_ref = reference(loss, model, t1)
    rows = {}
    for scale in scales:
        solver = StiffSwitch(stiff_error_scale=scale)

        def solve(solver=solver, t1=t1):
            return solve_to(loss, model, t1=t1, solver=solver, rtol=rtol)

        timed(lambda solve=solve: solve(t1=1.0))  # compile
        tr, wall = timed(solve)
        err = rel_error(tr.final, x_ref)
        rows[f"{scale:g}"] = {
            "status": tr.status,
            "wall_s": wall,
            "grad_evals": tr.stats["grad_evals"],
            "num_steps": tr.stats["num_steps"],
            "rel_error_final": err,
        }
        print(f"  scale {scale:g}: {rows[f'{scale:g}']}", flush=True)
    record = {"t1": t1, "rtol": rtol, "rows": rows}
    save("error_scale", record)
    return record
