"""Regenerate every benchmark of issue 5 and the table in BENCHMARKS.md.

    PYTHONPATH=$PWD python -m benchmarks --quick      # a few minutes on 2 cores
    PYTHONPATH=$PWD python -m benchmarks              # the full grid
    PYTHONPATH=$PWD python -m benchmarks --only stiff scipy

Writes benchmarks/results/*.json and *.png (git-ignored) and rewrites the block
between the result markers in BENCHMARKS.md from those JSON files.
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)  # entry point: the flows are float64

SECTIONS = (
    "stiff",
    "scipy",
    "overhead",
    "sweep",
    "compile",
    "seqloss",
    "precision",
    "trace",
    "scale",
    "scipy_stiff",
    "deep",
    "monitor",
    "distributed",
    "compile_cache",
)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument("--quick", action="store_true", help="smaller grids, fewer repeats")
    p.add_argument("--only", nargs="+", choices=SECTIONS, default=SECTIONS)
    p.add_argument("--no-table", action="store_true", help="do not touch BENCHMARKS.md")
    args = p.parse_args(argv)
    q = args.quick
    from gflow.dynamics.solvers import StiffSwitch

    from . import compile as compile_bench
    from . import (
        compile_cache,
        deep_cost,
        distributed_sweep,
        error_scale,
        monitor_overhead,
        overhead,
        scipy_cmp,
        seqloss,
        stiff,
        sweep,
        work_precision,
    )

    runs = {
        "stiff": lambda: stiff.run(t1=3000.0, repeats=1 if q else 3),
        # issue 12: the default flow to t = 300 at rtol 1e-8 against DOP853
        "scipy": lambda: scipy_cmp.run(
            t1=300.0,
            rtol=1e-8,
            methods=("DOP853",) if q else ("DOP853", "RK45"),
            repeats=1 if q else 3,
        ),
        "overhead": lambda: overhead.run(
            repeats=2 if q else 5,
            # Tsit5 to t = 3000 takes ~20 s a solve: the full run only
            plain_runs=(("auto", 400.0), ("auto", 3000.0), ("tsit5", 400.0))
            + (() if q else (("tsit5", 3000.0),)),
            plain_repeats=2 if q else 3,
        ),
        "sweep": lambda: sweep.run(steps=200 if q else 1000, repeats=2 if q else 3),
        "compile": lambda: compile_bench.run(
            solvers=("default",) if q else ("tsit5", "default")
        ),
        "seqloss": lambda: seqloss.run(repeats=10 if q else 50),
        "precision": lambda: work_precision.run(t1=150.0 if q else 400.0, quick=q),
        "scale": lambda: error_scale.run(),
        # the stiff horizon: scipy's explicit method against StiffSwitch
        "scipy_stiff": lambda: scipy_cmp.run(
            t1=3000.0,
            rtol=1e-6,
            methods=("DOP853",),
            repeats=1,
            solver=StiffSwitch(),
            ref_rtol=1e-11,
        ),
        "deep": lambda: deep_cost.run(quick=q),  # its own tables: deep_cost.md
        # its own table: monitor_overhead.md
        "monitor": lambda: monitor_overhead.run(quick=q),
        # gflow sweep over 1, 2, 4 processes; its own block: --write-docs
        "distributed": lambda: distributed_sweep.run(repeats=1 if q else 2),
        # a second gflow flow with a warm cache; its own block: --write-docs
        "compile_cache": lambda: compile_cache.run(repeats=1 if q else 2),
        "trace": lambda: work_precision.stiffness_trace(
            t1=1500.0 if q else 3000.0, n=16 if q else 61
        ),
    }
    for name in args.only:
        start = time.perf_counter()
        print(f"[{name}]", flush=True)
        runs[name]()
        print(f"[{name}] {time.perf_counter() - start:.0f} s", flush=True)
    if not args.no_table:
        from .table import write_table

        write_table()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
