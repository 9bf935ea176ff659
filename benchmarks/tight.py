"""StiffSwitch at tighter tolerances on the default flow to t = 3000.

Counts gradient evaluations and the final-parameter error against the cached Dopri8
reference (run ``--only stiff`` first), to find the tolerance at which StiffSwitch
matches Tsit5 + PID at rtol 1e-6 in accuracy. Gradient-evaluation counts do
not depend on machine load. Writes results/stiff_tight.json.
"""

from __future__ import annotations

import numpy as np

from gflow import solve_flow
from gflow.solvers import StiffSwitch

from .common import default_problem, flat, save, timed
from .stiff import reference


def run(*, t1: float = 3000.0, rtols=(1e-7, 1e-8)) -> dict:
    loss, model = default_problem()
    x_ref = reference(loss, model, t1)
    rows = {}
    for rtol in rtols:
        tr, wall = timed(
            lambda rtol=rtol: solve_flow(
                loss,
                model,
                t1=t1,
                solver=StiffSwitch(),
                rtol=rtol,
                atol=rtol * 1e-2,
                progress=False,
            )
        )
        err = float(np.linalg.norm(flat(tr.final) - x_ref) / np.linalg.norm(x_ref))
        rows[f"{rtol:g}"] = {
            "status": tr.status,
            "wall_s_incl_compile_once": wall,
            "grad_evals": tr.stats["grad_evals"],
            "num_steps": tr.stats["num_steps"],
            "rel_error_final": err,
        }
        print(f"  {rtol:g}: {rows[f'{rtol:g}']}", flush=True)
    record = {"t1": t1, "solver": "StiffSwitch", "rows": rows}
    save("stiff_tight", record)
    return record
