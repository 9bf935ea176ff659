"""Stiffness-aware integration of the default flow to t = 3000 and t = 400 (issues 5
and 12).

Diffrax Tsit5 + PID against gflow's default AutoSwitch (Tsit5 until its stages say
stiff, then the cheaper of EXPRB32 and SplitRKC2), the previous default (AutoSwitch
with plain RKC2), StiffSwitch (Tsit5/RKC2), and plain RKC2, SplitRKC2, ROCK4 and
EXPRB32, all at the same rtol, in one process, each compiled once before timing;
final parameters against a float64 Dopri8 reference at rtol 1e-11 (cached in
benchmarks/results/reference_<t1>.npy). The short horizon (t = 400, not yet stiff)
checks that the default costs about what Tsit5 does there. Writes results/stiff.json.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import diffrax
import numpy as np

from gflow import solve_flow
from gflow.dynamics.solvers import (
    EXPRB32,
    RKC2,
    ROCK4,
    AutoSwitch,
    SplitRKC2,
    StiffSwitch,
)

from .common import (
    RESULTS,
    SEED,
    default_problem,
    flat,
    rel_error,
    save,
    solve_to,
    timed,
)
from .quiet import replace_block

ROOT = Path(__file__).resolve().parents[1]


def reference(loss, model, t1: float, *, rtol: float = 1e-11) -> np.ndarray:
    """Final flat parameters of Dopri8 at ``rtol`` (atol rtol/100; cached: it costs
    minutes)."""
    tag = "" if rtol == 1e-11 else f"_rtol{rtol:g}"
    path = RESULTS / f"reference_{t1:g}{tag}.npy"
    if path.exists():
        return np.load(path)
    tr = solve_flow(
        loss,
        model,
        t1=t1,
        solver=diffrax.Dopri8(),
        rtol=rtol,
        atol=rtol * 1e-2,
        progress=False,
    )
    if tr.status != "success":
        raise RuntimeError(f"reference solve failed: {tr.status}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    np.save(path, flat(tr.final))
    return flat(tr.final)


def _rows(loss, model, solvers, *, t1: float, rtol: float, repeats: int) -> dict:
    x_ref = reference(loss, model, t1)
    rows = {}
    for name, solver in solvers:

        def solve(solver=solver, t1=t1):
            return solve_to(loss, model, t1=t1, solver=solver, rtol=rtol)

        # t1 and ts are traced: a short solve compiles the same program
        _, first = timed(lambda solve=solve: solve(t1=1.0))
        tr, wall = timed(solve, repeats=repeats)
        _, short = timed(lambda solve=solve: solve(t1=1.0))
        err = rel_error(tr.final, x_ref)
        rows[name] = {
            "status": tr.status,
            "wall_s": wall,
            "compile_s": max(first - short, 0.0),
            "num_steps": tr.stats["num_steps"],
            "grad_evals": tr.stats["grad_evals"],
            "rel_error_final": err,
            "final_loss": float(tr.metrics["loss"][-1]),
            "load_average": os.getloadavg()[0],
        }
        print(f"  t1={t1:g} {name}: {rows[name]}", flush=True)
    base = rows["tsit5"]
    for row in rows.values():
        row["speedup_vs_tsit5"] = base["wall_s"] / row["wall_s"]
        row["grad_eval_ratio_vs_tsit5"] = base["grad_evals"] / row["grad_evals"]
        row["as_accurate_as_tsit5"] = row["rel_error_final"] <= base["rel_error_final"]
    return rows


def run(
    *,
    t1: float = 3000.0,
    t1_short: float = 400.0,
    rtol: float = 1e-6,
    repeats: int = 2,
    short_repeats: int = 9,
) -> dict:
    """``short_repeats``: the t1_short solves take tens of milliseconds, where one
    scheduler hiccup moves a ratio by 10 %; the minimum of more repeats is steadier."""
    loss, model = default_problem()
    long_solvers = [
        ("tsit5", diffrax.Tsit5()),
        ("auto", AutoSwitch()),
        ("auto_rkc2", AutoSwitch(chebyshev=RKC2())),
        ("stiff_switch", StiffSwitch()),
        ("rkc2", RKC2()),
        ("split_rkc2", SplitRKC2()),
        ("rock4", ROCK4()),
        ("exprb32", EXPRB32()),
    ]
    rows = _rows(loss, model, long_solvers, t1=t1, rtol=rtol, repeats=repeats)
    short = _rows(
        loss,
        model,
        [
            ("tsit5", diffrax.Tsit5()),
            ("auto", AutoSwitch()),
            ("auto_rkc2", AutoSwitch(chebyshev=RKC2())),
        ],
        t1=t1_short,
        rtol=rtol,
        repeats=max(repeats, short_repeats),
    )
    record = {
        "seed": SEED,
        "t1": t1,
        "rtol": rtol,
        "atol": rtol * 1e-2,
        "solvers": rows,
        "short": {
            "t1": t1_short,
            "solvers": short,
            "repeats": max(repeats, short_repeats),
        },
        "repeats": repeats,
    }
    save("stiff", record)
    return record


START, END = "<!-- default_solver:start -->", "<!-- default_solver:end -->"


def block(record: dict) -> str:
    """The markdown rows of a stiff record, each with its own load average (records
    from before the seed was kept used seed 0, the only one the benchmark has had)."""
    m = record["machine"]
    lines = [
        f"Measured {m['date']} on {m['cpus']} CPUs ({m['processor']}), jax {m['jax']}, "
        f"by `PYTHONPATH=$PWD python -m benchmarks --only stiff --no-table` and then "
        f'`python -c "from benchmarks.stiff import write_block; write_block()"`. '
        f"Default Markov flow from the initial weights of seed {record.get('seed', 0)} "
        "(`jax.random.key`; one seed: a timing), float64, rtol "
        f"{record['rtol']:g}; error = relative "
        f"distance of the final parameters to a float64 Dopri8 reference at rtol "
        f"1e-11; warm wall time (compiled before timing, min of "
        f"{_repeats(record)}).",
        "",
        "| t1 | solver | gradient evals | × fewer than Tsit5 | error | warm wall | "
        "× faster than Tsit5 | compile | load (1 min) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    sets = [(record["t1"], record["solvers"])]
    if "short" in record:
        sets.append((record["short"]["t1"], record["short"]["solvers"]))
    for t1, rows in sets:
        quiet = all(r["load_average"] <= 1.5 for r in rows.values())
        for name, r in rows.items():
            # a wall time or a ratio of them only where every row of the set was
            # taken at load ≤ 1.5
            wall, speed = (
                (f"{r['wall_s']:.3g} s", f"{r['speedup_vs_tsit5']:.2f}")
                if quiet
                else ("withheld (load > 1.5)", "withheld")
            )
            lines.append(
                f"| {t1:g} | {name} | {r['grad_evals']:,} | "
                f"{r['grad_eval_ratio_vs_tsit5']:.2f} | {r['rel_error_final']:.1e} | "
                f"{wall} | {speed} | "
                f"{r['compile_s']:.1f} s | {r['load_average']:.2f} |"
            )
    return "\n".join(lines)


def _repeats(record: dict) -> str:
    if "repeats" not in record:
        return "repeats"
    return (
        f"{record['repeats']} repeats at t1 = {record['t1']:g}, "
        f"{record['short']['repeats']} at t1 = {record['short']['t1']:g}"
    )


def write_block(doc: Path = ROOT / "BENCHMARKS.md") -> None:
    """Rewrite BENCHMARKS.md's default-solver block from results/stiff.json."""
    record = json.loads((RESULTS / "stiff.json").read_text())
    replace_block(doc, START, END, block(record) + "\n")
