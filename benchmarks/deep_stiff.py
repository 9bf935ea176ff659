"""The issue-31 standard block through its stiff phase: the default solver against
Diffrax Tsit5 and the two stiff methods alone, in one process (issue 31, point 2).

The block of ``experiments/stiff_spectrum.py`` (2 layers, 2 heads, width 16,
value/output, pre-LayerNorm, residual, MLP 32, positions, init 0.02, 64 Markov
sequences of length 33, float64; sample key 0, model key 1), ``solve_flow`` from
t = 0 at rtol 1e-6, atol 1e-8:

- the default (AutoSwitch) to ``t1``;
- RKC2 alone to ``t1``;
- Tsit5, and EXPRB32 alone, each with the step budget that gives it about the
  default's gradient evaluations (a Tsit5 step costs 6, an EXPRB32 step 18): how far
  each gets on the same work, and, from its StallReport, how many steps its last step
  size would need to reach ``t1``.

Each row records status, the t reached, steps, gradient evaluations, the final loss,
the wall time (the first solve of each compiles; the block is too slow to run twice)
and the load average; the default's row also has the relative distance between its
final parameters and RKC2's (two methods that agree bound each other's error).

Command:  PYTHONPATH=$PWD nice -n 10 python -m benchmarks.deep_stiff [--t1 3]
          PYTHONPATH=$PWD nice -n 10 python -m benchmarks.deep_stiff --accuracy
Runtime:  about 25 minutes on 2 cores (each gradient about 9 ms).
Writes:   benchmarks/results/deep_stiff.json.
"""

from __future__ import annotations

import argparse
import time

import jax

if __name__ == "__main__":
    jax.config.update("jax_enable_x64", True)

import diffrax  # noqa: E402

from .common import RESULTS as RESULTS_DIR  # noqa: E402
from .common import flat, load1, rel_error, save  # noqa: E402

EVALS_PER_STEP = {"tsit5": 6, "exprb32": 18}


def _row(tr, start: float) -> dict:
    return {
        "status": tr.status,
        **tr.stats,
        "final_loss": float(tr.metrics["loss"][-1]),
        "wall_s_with_compile": time.perf_counter() - start,
        "load_average": load1(),
        "stall": None if tr.diagnosis is None else tr.diagnosis.message,
    }


def run(*, t1: float = 3.0, solvers=("auto", "rkc2", "tsit5", "exprb32")) -> dict:
    from experiments.stiff_spectrum import problem
    from gflow import solve_flow
    from gflow.dynamics.solvers import EXPRB32, RKC2, AutoSwitch

    table = {
        "auto": AutoSwitch(),
        "rkc2": RKC2(),
        "exprb32": EXPRB32(),
        "tsit5": diffrax.Tsit5(),
    }
    loss, model = problem()
    rows, finals = {}, {}
    budget = None
    for name in solvers:
        if name in EVALS_PER_STEP and budget is None:
            raise ValueError(f"{name} needs the default's budget: run auto first")
        max_steps = (
            1_000_000 if name not in EVALS_PER_STEP else budget // EVALS_PER_STEP[name]
        )
        start = time.perf_counter()
        tr = solve_flow(
            loss, model, t1=t1, solver=table[name], max_steps=max_steps, progress=False
        )
        rows[name] = {"max_steps": max_steps, **_row(tr, start)}
        finals[name] = tr.final
        if name == "auto":
            budget = int(tr.stats["grad_evals"])
        print(name, rows[name], flush=True)
    if "auto" in finals and "rkc2" in finals:
        rows["auto"]["distance_to_rkc2"] = rel_error(
            finals["auto"], flat(finals["rkc2"])
        )
    record = {
        "t1": t1,
        "rtol": 1e-6,
        "atol": 1e-8,
        "budget": budget,
        "default": "AutoSwitch with SplitRKC2",
        "rows": rows,
    }
    save("deep_stiff", record)
    return record


def accuracy(*, t1: float = 1.75) -> dict:
    """Final distances to a Dopri8 reference (rtol 1e-10, atol 1e-12) at a horizon
    Tsit5 still reaches, past the stiffening's onset (λ_max ≈ 5e4 at t = 1.75): the
    default, the previous default (AutoSwitch with plain RKC2), RKC2, SplitRKC2 and
    Tsit5 at rtol 1e-6. Writes results/deep_stiff_accuracy.json."""
    from experiments.stiff_spectrum import problem
    from gflow import solve_flow
    from gflow.dynamics.solvers import RKC2, AutoSwitch, SplitRKC2

    loss, model = problem()
    ref = solve_flow(
        loss,
        model,
        t1=t1,
        solver=diffrax.Dopri8(),
        rtol=1e-10,
        atol=1e-12,
        progress=False,
    )
    if ref.status != "success":
        raise RuntimeError(f"the reference stopped: {ref.status}")
    x_ref = flat(ref.final)
    rows = {"reference": {"grad_evals": ref.stats["grad_evals"]}}
    for name, solver in (
        ("auto", AutoSwitch()),
        ("auto_rkc2", AutoSwitch(chebyshev=RKC2())),  # the default before SplitRKC2
        ("rkc2", RKC2()),
        ("split_rkc2", SplitRKC2()),
        ("tsit5", diffrax.Tsit5()),
    ):
        start = time.perf_counter()
        tr = solve_flow(loss, model, t1=t1, solver=solver, progress=False)
        rows[name] = {
            "status": tr.status,
            "grad_evals": tr.stats["grad_evals"],
            "distance": rel_error(tr.final, x_ref),
            "wall_s_with_compile": time.perf_counter() - start,
            "load_average": load1(),
        }
        print(name, rows[name], flush=True)
    record = {"t1": t1, "rtol": 1e-6, "reference": "Dopri8 rtol 1e-10", "rows": rows}
    save("deep_stiff_accuracy", record)
    return record


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--t1", type=float, default=3.0)
    p.add_argument(
        "--accuracy",
        action="store_true",
        help="only the distances to a Dopri8 reference at t = 1.75",
    )
    p.add_argument("--solvers", nargs="+", default=["auto", "rkc2", "tsit5", "exprb32"])
    a = p.parse_args()
    if a.accuracy:
        accuracy()
    else:
        run(t1=a.t1, solvers=a.solvers)


if __name__ == "__main__":
    main()


START, END = "<!-- deep_stiff:start -->", "<!-- deep_stiff:end -->"


def block(record: dict) -> str:
    """The markdown block of a deep_stiff record."""
    m, rows, t1 = record["machine"], record["rows"], record["t1"]
    auto = rows["auto"]
    lines = [
        f"Measured {m['date']} on {m['cpus']} CPUs, jax {m['jax']}, by "
        "`PYTHONPATH=$PWD nice -n 10 python -m benchmarks.deep_stiff` and then "
        '`python -c "from benchmarks.deep_stiff import write_block; write_block()"`. '
        "The issue-31 standard block (sample key 0, model key 1), float64, from t = 0 "
        f"to t = {t1:g} at rtol {record['rtol']:g}, atol {record['atol']:g}, one "
        "process. Tsit5 and EXPRB32 alone get the step budget that gives them about "
        f"the default's {record['budget']:,} gradient evaluations. Wall times include "
        "the compile (each solve runs once) and are context only: each row's load "
        "is beside it.",
        "",
        "| solver | status | t reached | steps (rejected) | gradient evaluations "
        "| loss at the last save reached | wall (with compile) | load (1 min) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    # records taken before SplitRKC2 joined the default name no default: their
    # "auto" is AutoSwitch with plain RKC2
    then = record.get("default") is None
    for name, r in rows.items():
        label = (
            "auto (the default then: AutoSwitch with plain RKC2)"
            if (then and name == "auto")
            else name
        )
        lines.append(
            f"| {label} | {r['status']} | {r['t_reached']:.4g} | {r['num_steps']:,} "
            f"({r['num_rejected_steps']:,}) | {r['grad_evals']:,} | "
            f"{r['final_loss']:.5f} | {_wall(r)} | {r['load_average']:.2f} |"
        )
    lines.append("")
    if "distance_to_rkc2" in auto:
        who = "The default's" if not then else "The default's (then with plain RKC2)"
        lines.append(
            f"{who} final parameters are "
            f"{auto['distance_to_rkc2']:.1e} (relative) from RKC2's."
        )
    acc = RESULTS_DIR / "deep_stiff_accuracy.json"
    if acc.exists():
        import json

        a = json.loads(acc.read_text())
        lines += [
            "",
            f"Accuracy where Tsit5 still gets through (`--accuracy`, taken "
            f"{a['machine']['date']}): to t = {a['t1']:g} at rtol {a['rtol']:g}, the "
            f"relative distance of the final parameters to {a['reference']} "
            f"({a['rows']['reference']['grad_evals']:,} evaluations):",
            "",
            "| solver | status | gradient evaluations | distance | load (1 min) |",
            "|---|---|---|---|---|",
        ]
        for name, r in a["rows"].items():
            if name != "reference":
                lines.append(
                    f"| {name} | {r['status']} | {r['grad_evals']:,} | "
                    f"{r['distance']:.1e} | {r['load_average']:.2f} |"
                )
    for name in ("tsit5", "exprb32"):
        if name in rows and rows[name]["stall"]:
            lines += ["", f"{name}'s StallReport, as the run printed it:", ""]
            lines += ["    " + line for line in rows[name]["stall"].splitlines()]
    return "\n".join(lines)


def _wall(row) -> str:
    """The wall time, withheld where the load was above MAX_LOAD."""
    from .table import MAX_LOAD

    if row["load_average"] is not None and row["load_average"] > MAX_LOAD:
        return f"withheld (load > {MAX_LOAD})"
    return f"{row['wall_s_with_compile']:.0f} s"


def write_block(doc=None) -> None:
    """Rewrite BENCHMARKS.md's deep_stiff block from results/deep_stiff.json."""
    import json
    from pathlib import Path

    from .common import RESULTS
    from .quiet import replace_block

    doc = doc or Path(__file__).resolve().parents[1] / "BENCHMARKS.md"
    record = json.loads((RESULTS / "deep_stiff.json").read_text())
    replace_block(doc, START, END, block(record) + "\n")
