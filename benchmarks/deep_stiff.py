"""The issue-31 standard block through its stiff phase: gradient evaluations of each
solver at the same tolerance (issue 31, point 2).

The block of ``experiments/stiff_spectrum.py`` (2 layers, 2 heads, width 16,
value/output, pre-LayerNorm, residual, MLP 32, positions, init 0.02, 64 Markov
sequences of length 33, float64; sample key 0, model key 1), ``solve_flow`` to ``t1``
at rtol 1e-6, atol 1e-8 with each solver and a step budget; records status, t
reached, steps, gradient evaluations, the final loss and the StallReport of a solve
that stopped. Wall times are recorded with the load beside them.

Command:  PYTHONPATH=$PWD nice -n 10 python -m benchmarks.deep_stiff [--t1 3]
          [--max-steps 1500] [--solvers rkc2 exprb32 auto tsit5]
Runtime:  minutes per solver on 2 cores (RKC2 to t = 3: 26 184 evaluations).
Writes:   benchmarks/results/deep_stiff.json.
"""

from __future__ import annotations

import argparse
import time

import jax

if __name__ == "__main__":
    jax.config.update("jax_enable_x64", True)

import diffrax  # noqa: E402

from .common import load1, save  # noqa: E402


def run(*, t1: float = 3.0, max_steps: int = 1500, solvers=("rkc2", "exprb32")):
    from experiments.stiff_spectrum import problem
    from gflow import solve_flow
    from gflow.dynamics.solvers import EXPRB32, RKC2, AutoSwitch

    table = {
        "rkc2": RKC2(),
        "exprb32": EXPRB32(),
        "auto": AutoSwitch(),
        "tsit5": diffrax.Tsit5(),
    }
    loss, model = problem()
    rows = {}
    for name in solvers:
        start = time.perf_counter()
        tr = solve_flow(
            loss, model, t1=t1, solver=table[name], max_steps=max_steps, progress=False
        )
        rows[name] = {
            "status": tr.status,
            **tr.stats,
            "final_loss": float(tr.metrics["loss"][-1]),
            "wall_s_with_compile": time.perf_counter() - start,
            "load_average": load1(),
            "stall": None if tr.diagnosis is None else tr.diagnosis.message,
        }
        print(name, rows[name], flush=True)
    save("deep_stiff", {"t1": t1, "max_steps": max_steps, "rtol": 1e-6, "rows": rows})
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--t1", type=float, default=3.0)
    p.add_argument("--max-steps", type=int, default=1500)
    p.add_argument("--solvers", nargs="+", default=["rkc2", "exprb32"])
    a = p.parse_args()
    run(t1=a.t1, max_steps=a.max_steps, solvers=a.solvers)


if __name__ == "__main__":
    main()
