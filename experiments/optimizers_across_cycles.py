"""Optimizers across the whole cycle: which stages each keeps, and when it leaves
the flow for the central flow (issue 19).

Question: on the default Markov model (MODEL.md §3, float64), do GD, heavy ball
(β = 0.9) and Adam (β₁ = 0.9) still show the cycle of the gradient flow to t = 3000,
and when do they leave the flow? The Hessian's λ_max grows along the flow (0.46 at
the start, ~128 at t ≈ 1400, ~275 at t ≈ 3000), so every fixed step size η meets its
stability bound c/η (GD: 2/η; heavy ball: (2 + 2β)/η) and then runs at the edge of
stability, where GD follows the central flow (Cohen et al. 2024) rather than the
gradient flow.

Per optimizer, η and seed (initialisations 0, 1, 2): the member's own stages
(``detect_stages`` on its own observables, cycle by cycle), its own λ_max at every
save and the first save where it exceeds c/η, its departure from the flow (first
save at parameter distance > 0.1) and its final distance to the flow and, for GD
with η ≥ 0.5, to GD's central flow (``CentralFlowReference``). The flow is solved
per seed with ``StiffSwitch`` at rtol 1e-8.

Command:
    PYTHONPATH=$PWD python experiments/optimizers_across_cycles.py [--write-docs]
        [--quick]

``--quick`` (t1 = 600, one seed, two step sizes per optimizer) checks the pipeline.
Writes experiments/results/optimizers_across_cycles/{results.json, table.md,
entropy.png, sharpness.png}; ``--write-docs`` copies the table and the figures into
docs/flow_vs_optimizers.md (between the ``across_cycles`` markers) and
docs/figures/across_cycles_*.png. Every finished seed is saved in results.json at
once, and a rerun reads finished seeds back instead of recomputing them.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

# XLA:CPU's multithreaded Eigen pool wedged twice in this script's vmapped metric
# evaluations (all threads idle on a futex inside the compiled call; a known hang,
# PyAutoLabs/PyAutoFit#1528: single-threaded Eigen avoids it). Before jax starts.
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from gflow import (  # noqa: E402
    CentralFlowReference,
    PopulationLoss,
    StageObservables,
    detect_stages,
    parameter_distance,
    sharpness_along,
    solve_flow,
)
from gflow.analysis import departure_time  # noqa: E402
from gflow.dynamics import optimizer_named, run_sweep  # noqa: E402
from gflow.dynamics.references import at_times, evaluate_along, union_times  # noqa: E402
from gflow.dynamics.solvers import StiffSwitch  # noqa: E402
from gflow.runs import FlowConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "results" / "optimizers_across_cycles"
DOC = ROOT / "docs" / "flow_vs_optimizers.md"
START, END = "<!-- across_cycles:start -->", "<!-- across_cycles:end -->"
THRESHOLD = 0.1


@dataclasses.dataclass(frozen=True)
class Settings:
    t1: float = 3000.0
    num_saves: int = 301
    seeds: int = 3
    lrs: tuple = (
        ("sgd", (0.05, 0.1, 0.5, 1.0)),
        ("momentum", (0.02, 0.05, 0.1)),
        ("adam", (0.02, 0.05, 0.1)),
    )
    central_min_lr: float = 0.5  # GD members with η ≥ this get the central flow
    beta: float = 0.9
    flow_rtol: float = 1e-8

    @classmethod
    def quick(cls) -> Settings:
        return cls(
            t1=600.0,
            num_saves=61,
            seeds=1,
            lrs=(("sgd", (0.1, 1.0)), ("momentum", (0.1,)), ("adam", (0.1,))),
        )


PAPER = ("condensation", "focus", "dilution", "asymmetry_lifting")


def _stage_string(stages) -> str:
    """C1 F1 D1 A1 ...; a provisional stage (a longer run could move it) ends in
    ``?``."""
    return (
        " ".join(
            f"{s['stage'][0].upper()}{s['cycle']}"
            + ("?" if s.get("provisional") else "")
            for s in stages
            if s["stage"] in PAPER  # the other named moves are not the paper's
        )
        or "-"
    )


def rules_hash() -> str:
    """The one-layer stage rules' code: results read with other rules are rerun."""
    h = hashlib.sha256()
    for name in ("stages.py", "key_classes.py", "stage.py"):
        h.update((ROOT / "gflow" / "analysis" / name).read_bytes())
    return h.hexdigest()[:16]


def _observe(traj, loss, chain):
    return evaluate_along(traj, loss, StageObservables(chain))


def _flow(cfg: FlowConfig, times, s: Settings):
    loss, model = PopulationLoss(cfg.chain()), cfg.model()
    union = union_times(times)
    traj = solve_flow(
        loss,
        model,
        t1=float(union[-1]),
        ts=union,
        solver=StiffSwitch(),
        rtol=s.flow_rtol,
        atol=s.flow_rtol * 1e-2,
        save_params=True,
        max_steps=10_000_000,
        progress=False,
    )
    return union, traj


def _member_record(name, lr, member, flow_at, loss, chain, key, stability):
    observed = _observe(member, loss, chain)
    stages = [x.to_dict() for x in detect_stages(observed, pi=np.asarray(chain.pi))]
    lam = sharpness_along(loss, member, key=key)
    over = lam > stability / lr
    dist = parameter_distance(member, flow_at)["total"]
    return {
        "optimizer": name,
        "lr": lr,
        "status": member.status,
        "t": member.t.tolist(),
        "stages": stages,
        "cycles": max((x["cycle"] for x in stages), default=0),
        "edge": stability / lr,
        "edge_time": float(member.t[np.argmax(over)]) if over.any() else None,
        "lambda_max": lam.tolist(),
        "entropy": np.asarray(observed.metrics["attention_entropy"]).tolist(),
        "departure": departure_time(member.t, dist, THRESHOLD),
        "flow_final": float(dist[-1]),
    }


def run_seed(seed: int, s: Settings) -> dict:
    """Every optimizer's members, the flow and the central flows for one seed."""
    cfg = dataclasses.replace(FlowConfig(), seed=seed, t1=s.t1)
    chain = cfg.chain()
    loss, model = PopulationLoss(chain), cfg.model()
    key = jax.random.key(seed)
    sweeps = {}
    for name, lrs in s.lrs:
        opt = optimizer_named(name, s.beta)
        run = run_sweep(
            loss, model, opt.transform(), lrs, t1=s.t1, num_saves=s.num_saves
        )
        sweeps[name] = (opt.stability, run)
    times = [run.t[m] for _, run in sweeps.values() for m in range(len(run.lrs))]
    union, flow = _flow(cfg, times, s)
    flow_obs = _observe(flow, loss, chain)
    out = {
        "seed": seed,
        "flow": {
            "t": flow.t.tolist(),
            "stages": [
                x.to_dict() for x in detect_stages(flow_obs, pi=np.asarray(chain.pi))
            ],
            "lambda_max": sharpness_along(loss, flow, key=key).tolist(),
            "entropy": np.asarray(flow_obs.metrics["attention_entropy"]).tolist(),
            "grad_evals": flow.stats.get("grad_evals"),
        },
        "members": [],
    }
    for name, (stability, run) in sweeps.items():
        for m, lr in enumerate(np.asarray(run.lrs, float)):
            member = run.member(m)
            flow_at = at_times(flow, union, member.t)
            rec = _member_record(
                name, float(lr), member, flow_at, loss, chain, key, stability
            )
            if name == "sgd" and lr >= s.central_min_lr and member.ok:
                start = time.perf_counter()
                (central,) = CentralFlowReference().solve(loss, model, [member.t], [lr])
                d = parameter_distance(member, central)["total"]
                rec["central_final"] = float(d[-1])
                rec["central_mean"] = float(np.mean(d[member.t >= rec["edge_time"]]))
                rec["flow_mean"] = float(
                    np.mean(
                        parameter_distance(member, flow_at)["total"][
                            member.t >= rec["edge_time"]
                        ]
                    )
                )
                rec["central_lambda_max"] = central.metrics["lambda_max"].tolist()
                rec["central_s"] = time.perf_counter() - start
            out["members"].append(rec)
            print(
                f"  seed {seed} {name} η={lr:g}: {rec['status']}, stages "
                f"{_stage_string(rec['stages'])}, λ_max > {rec['edge']:.3g} at "
                f"{rec['edge_time']}, departs {rec['departure']}, final distance "
                f"to flow {rec['flow_final']:.3g}"
                + (
                    f", to central {rec['central_final']:.3g}"
                    if "central_final" in rec
                    else ""
                ),
                flush=True,
            )
    return out


def _pm(values, fmt="{:.3g}") -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(np.mean(values))} ± {fmt.format(np.std(values, ddof=1))}"


def table(results: list[dict], s: Settings) -> str:
    """The markdown table: one row per optimizer and η, over the seeds."""
    n = len(results)
    flows = [_stage_string(r["flow"]["stages"]) for r in results]
    seeds = [r.get("seed", k) for k, r in enumerate(results)]
    lines = [
        f"Seeds {', '.join(map(str, seeds))} of the initial weights (± is the sample "
        f'sd over them; "stages" is seed {seeds[0]}\'s list, "same in" counts the '
        "seeds with the same list). Stages by `gflow.detect_stages` "
        "(docs/stage_rules.md); one marked ? is provisional: still open at t1, or "
        "after an open one, so a longer run could move it; it is not a closed "
        "stage.",
        "",
        f"Gradient flow: stages {flows[0]}"
        + ("" if len(set(flows)) == 1 else f" (seeds differ: {'; '.join(flows)})")
        + f"; λ_max from {results[0]['flow']['lambda_max'][0]:.3g} to "
        f"{_pm([r['flow']['lambda_max'][-1] for r in results])} at t = {s.t1:g}.",
        "",
        "| optimizer | η | c/η | λ_max > c/η at | stages (first seed) | same in | "
        "departs flow at | final distance to flow | to central flow |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    keys = [(m["optimizer"], m["lr"]) for m in results[0]["members"]]
    for name, lr in keys:
        recs = [
            next(m for m in r["members"] if (m["optimizer"], m["lr"]) == (name, lr))
            for r in results
        ]
        first = _stage_string(recs[0]["stages"])
        same = sum(_stage_string(x["stages"]) == first for x in recs)
        status = {x["status"] for x in recs}
        lines.append(
            f"| {name} | {lr:g} | {recs[0]['edge']:.3g} | "
            f"{_pm([x['edge_time'] for x in recs])} | {first}"
            + ("" if status == {"success"} else f" ({', '.join(sorted(status))})")
            + f" | {same}/{n} | {_pm([x['departure'] for x in recs])} | "
            f"{_pm([x['flow_final'] for x in recs])} | "
            f"{_pm([x.get('central_final') for x in recs])} |"
        )
    return "\n".join(lines)


def figures(results: list[dict], s: Settings, out: Path) -> list[Path]:
    """Entropy and λ_max against t, one panel per optimizer (seed 0), c/η dashed."""
    r = results[0]
    names = [name for name, _ in s.lrs]
    paths = []
    for key, ylabel, fname in (
        ("entropy", "π-weighted attention entropy", "entropy.png"),
        ("lambda_max", "λ_max of the Hessian", "sharpness.png"),
    ):
        fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 3.6))
        for ax, name in zip(np.atleast_1d(axes), names):
            ax.plot(r["flow"]["t"], r["flow"][key], "k-", lw=2, label="flow")
            for m in (x for x in r["members"] if x["optimizer"] == name):
                (line,) = ax.plot(m["t"], m[key], lw=1, label=f"η={m['lr']:g}")
                if key == "lambda_max":
                    ax.axhline(m["edge"], color=line.get_color(), ls="--", lw=0.8)
                    if "central_lambda_max" in m:
                        ax.plot(
                            m["t"],
                            m["central_lambda_max"],
                            ":",
                            color=line.get_color(),
                            lw=1.5,
                            label=f"central η={m['lr']:g}",
                        )
            if key == "lambda_max":
                ax.set_yscale("log")
            ax.set_title(name)
            ax.set_xlabel("t = Σ η")
            ax.set_ylabel(ylabel)
            ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / fname
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--write-docs", action="store_true")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    s = Settings.quick() if args.quick else Settings()
    args.out.mkdir(parents=True, exist_ok=True)
    record = args.out / "results.json"
    saved = json.loads(record.read_text()) if record.exists() else {}
    if (
        saved.get("settings") != json.loads(json.dumps(dataclasses.asdict(s)))
        or saved.get("rules") != rules_hash()
    ):
        saved = {"settings": dataclasses.asdict(s), "rules": rules_hash(), "seeds": []}
    start, load = time.perf_counter(), os.getloadavg()[0]
    for seed in range(len(saved["seeds"]), s.seeds):
        print(f"seed {seed + 1}/{s.seeds}", flush=True)
        saved["seeds"].append(run_seed(seed, s))
        record.write_text(json.dumps(saved))  # a finished seed is never lost
    wall = time.perf_counter() - start
    text = table(saved["seeds"], s)
    paths = figures(saved["seeds"], s, args.out)
    cmd = "PYTHONPATH=$PWD python experiments/optimizers_across_cycles.py"
    note = f"Regenerated by `{cmd} --write-docs`" + (
        f" in {wall / 60:.1f} min (load average {load:.2f} at the start)."
        if wall > 60
        else " (read back from results.json)."
    )
    (args.out / "table.md").write_text(text + "\n\n" + note + "\n")
    print(text)
    if args.write_docs:
        from experiments._docs import replace_block

        figs = []
        for path in paths:
            target = ROOT / "docs" / "figures" / f"across_cycles_{path.name}"
            shutil.copyfile(path, target)
            figs.append(f"![{path.stem}](figures/{target.name})")
        replace_block(
            DOC, START, END, "\n\n".join([text, note, *figs]) + "\n", append=True
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
