"""Is full-batch GD the flow's stand-in on the ladder's rungs? (issue 30 point 2)

The ladder (``experiments/practical_ladder.py``) reads full-batch GD at η = 0.5 as
the flow's stand-in. Here each rung is run both ways through ``gflow train``'s
Python API (``TrainConfig``, ``prepare``, ``run_train``): ``method="gd"`` and
``method="flow"`` (the default solver) on the same fixed sample, from the same
init, with the ladder's settings (width 16, context 32, 64 sequences, init 1e-3,
rung 8: 0.02, 600 steps to t = 300), in float64. For each run: λ_max of the
sample loss (Lanczos) at the init and at GD's end, so η·λ_max/2 (GD is stable on a
quadratic only below 1); the flow's status, where it got to and its gradient
evaluations; per head, the stages each finds (``detect_head_stages``), and how
many heads find the same ones.

A flow on a rung whose seed-0 flow does not reach t = 300 within ``MAX_STEPS``
steps is not run for the other seeds (it would cost the same budget and stop at
the same place); the block says so.

Command:
    PYTHONPATH=$PWD python experiments/ladder_flow.py             # the runs, the block
    PYTHONPATH=$PWD python experiments/ladder_flow.py --quick     # smoke run
    PYTHONPATH=$PWD python experiments/ladder_flow.py --doc-only  # the block

Resumable: each (data, rung, seed) is cached as one JSON file under
``experiments/results/ladder_flow/``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from experiments import _docs
from experiments import practical_ladder as pl
from gflow.analysis import detect_head_stages, max_eigenvalue
from gflow.runs.train import TrainConfig, prepare, run_train

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "results" / "ladder_flow"
DOC = ROOT / "docs" / "practical_models.md"
START, END = "<!-- ladder_flow:start -->", "<!-- ladder_flow:end -->"
#: The flow's step budget per run: a stalled flow costs at most this many steps.
MAX_STEPS = 2000


@dataclasses.dataclass(frozen=True)
class Config:
    datasets: tuple[str, ...] = ("markov", "icl-markov")
    rungs: tuple[str, ...] = tuple(name for name, _ in pl.RUNGS)
    seeds: tuple[int, ...] = (0, 1, 2)
    d_model: int = 16
    context: int = 32
    windows: int = 64
    eval_batch: int = 128
    steps: int = 600
    num_saves: int = 41
    lr: float = 0.5
    init_scale: float = 1e-3
    max_steps: int = MAX_STEPS
    tag: str = "full"


QUICK = Config(
    datasets=("markov",),
    rungs=("0 paper", "4 +pre-LN"),
    seeds=(0,),
    d_model=4,
    context=8,
    windows=8,
    eval_batch=16,
    steps=40,
    num_saves=5,
    max_steps=200,
    tag="quick",
)


def train_config(cfg: Config, data: str, rung: str, seed: int, method: str):
    """The ``TrainConfig`` of one run: the rung's model, the data, the method."""
    return TrainConfig(
        data=data,
        d_model=cfg.d_model,
        seq_len=cfg.context,
        windows=cfg.windows,
        eval_batch=cfg.eval_batch,
        steps=cfg.steps,
        num_saves=cfg.num_saves,
        lr=cfg.lr,
        method=method,
        max_steps=cfg.max_steps,
        seed=seed,
        x64=True,
        **pl.model_settings(cfg, rung),
    )


def _heads(traj) -> dict:
    """Per head "layer,head" -> sorted [stage, cycle] pairs it shows."""
    run = {
        "head_entropy": np.asarray(traj.metrics["head_entropy"]),
        "stages": [s.to_dict() for s in detect_head_stages(traj)],
    }
    return {
        f"{layer},{head}": sorted(map(list, found))
        for (layer, head), found in pl._head_stages(run).items()
    }


def _sharpness(data, model, seed: int) -> float:
    lam, _ = max_eigenvalue(data.fixed_loss, model, key=jax.random.key(seed))
    return float(lam)


def run_cell(cfg: Config, data: str, rung: str, seed: int, flow: bool) -> dict:
    """GD and (with ``flow``) the flow of one cell, with λ_max at GD's ends."""
    out = {"data": data, "rung": rung, "seed": seed}
    for method in ("gd", "flow") if flow else ("gd",):
        train = train_config(cfg, data, rung, seed, method)
        prepared = prepare(train)
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as folder:
            traj = run_train(train, prepared, checkpoint_dir=folder)
        rec = {
            "status": traj.status,
            "t_reached": float(traj.stats.get("t_reached", traj.t[-1])),
            "grad_evals": int(traj.stats.get("grad_evals", 0)),
            "wall_s": time.perf_counter() - start,
            "train_loss": float(traj.metrics["train_loss"][-1]),
            "heads": _heads(traj),
        }
        if method == "gd":
            init = jax.tree.map(lambda x: x[0], traj.params)
            rec["lam_init"] = _sharpness(prepared, init, seed)
            rec["lam_end"] = _sharpness(prepared, traj.final, seed)
            gd_final = traj.final
        elif traj.status == "success":
            a = np.concatenate([np.ravel(x) for x in jax.tree.leaves(gd_final)])
            b = np.concatenate([np.ravel(x) for x in jax.tree.leaves(traj.final)])
            rec["distance"] = float(np.linalg.norm(a - b) / np.linalg.norm(b))
        out[method] = rec
    return out


def _path(cfg: Config, data: str, rung: str, seed: int) -> Path:
    return OUT / cfg.tag / f"{data}_{rung.split()[0]}_{seed}.json"


def run(cfg: Config, *, log=print) -> None:
    start = time.perf_counter()
    for data in cfg.datasets:
        for rung in cfg.rungs:
            flows = True
            for seed in cfg.seeds:
                path = _path(cfg, data, rung, seed)
                if path.exists():
                    rec = json.loads(path.read_text())
                else:
                    rec = run_cell(cfg, data, rung, seed, flows)
                    rec["uptime"] = _docs.uptime()
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(json.dumps(rec))
                    log(f"{data} {rung} seed {seed}: {_line(rec, cfg.lr)}", flush=True)
                flows = flows and rec.get("flow", {}).get("status") == "success"
    log(f"{time.perf_counter() - start:.0f} s", flush=True)


def _line(rec: dict, eta: float) -> str:
    gd, flow = rec["gd"], rec.get("flow")
    text = f"η·λ/2 {eta * gd['lam_init'] / 2:.3g} → {eta * gd['lam_end'] / 2:.3g}"
    if flow:
        text += f"; flow {flow['status']} at t = {flow['t_reached']:.3g}"
    return text


def _agree(rec: dict) -> tuple[int, int]:
    """(heads whose GD and flow stage sets are equal, heads)."""
    gd, flow = rec["gd"]["heads"], rec["flow"]["heads"]
    return sum(gd[h] == flow[h] for h in gd), len(gd)


def _count(heads: dict, stage: str) -> int:
    return sum(any(s == stage and c == 1 for s, c in found) for found in heads.values())


def block(cfg: Config) -> str:
    recs = [json.loads(p.read_text()) for p in sorted((OUT / cfg.tag).glob("*.json"))]
    rows = []
    for data in cfg.datasets:
        for rung in cfg.rungs:
            group = [r for r in recs if (r["data"], r["rung"]) == (data, rung)]
            if not group:
                continue
            eta = cfg.lr
            ratio0 = [eta * r["gd"]["lam_init"] / 2 for r in group]
            ratio1 = [eta * r["gd"]["lam_end"] / 2 for r in group]
            flows = [r["flow"] for r in group if "flow" in r]
            done = [f for f in flows if f["status"] == "success"]
            heads = sum(len(r["gd"]["heads"]) for r in group)

            def stages(method, rs=group):
                return "/".join(
                    str(sum(_count(r[method]["heads"], s) for r in rs))
                    for s in ("focus", "dilution", "asymmetry_lifting")
                )

            both = [r for r in group if r.get("flow", {}).get("status") == "success"]
            agree = [_agree(r) for r in both]
            flown = sum(len(r["gd"]["heads"]) for r in both)
            if flows and not done:
                reached = ", ".join(f"{f['t_reached']:.3g}" for f in flows)
                flow_cell = (
                    f"stalls: t = {reached} of {eta * cfg.steps:g} ({len(flows)} run)"
                )
            elif flows:
                evals = np.median([f["grad_evals"] for f in done])
                flow_cell = (
                    f"{len(done)}/{len(flows)} reach t = {eta * cfg.steps:g}, "
                    f"{evals:.0f} gradients (median)"
                )
            else:
                flow_cell = "not run"
            rows.append(
                [
                    data,
                    rung,
                    len(group),
                    f"{min(ratio0):.3g}-{max(ratio0):.3g}",
                    f"{min(ratio1):.3g}-{max(ratio1):.3g}",
                    flow_cell,
                    f"{stages('gd')} of {heads}",
                    f"{stages('flow', both)} of {flown}" if both else "—",
                    f"{sum(a for a, _ in agree)}/{sum(n for _, n in agree)}"
                    if agree
                    else "—",
                    f"{max(r['flow']['distance'] for r in both):.2g}" if both else "—",
                ]
            )
    header = [
        "data",
        "rung",
        "seeds",
        "η·λ_max/2 at init",
        "at GD's end",
        "the flow (default solver)",
        "GD: heads with focus/dilution/lifting",
        "flow: the same",
        "heads with the same stages",
        f"max ‖θ_GD − θ_flow‖/‖θ_flow‖ at t = {cfg.lr * cfg.steps:g}",
    ]
    uptimes = sorted({r.get("uptime", "?").split("load average:")[-1] for r in recs})
    return (
        f"Generated by `PYTHONPATH=$PWD python experiments/ladder_flow.py` (seeds "
        f"{list(cfg.seeds)}; width {cfg.d_model}, context {cfg.context}, "
        f"{cfg.windows} sequences, init {cfg.init_scale} (rung 8: 0.02), GD η = "
        f"{cfg.lr} for {cfg.steps} steps, the flow to the same t with the default "
        f"solver at rtol 1e-6, at most {cfg.max_steps} steps, float64; load "
        f"averages at the cells' ends: {uptimes[0].strip()} to {uptimes[-1].strip()}). "
        "λ_max is the sample loss's top Hessian eigenvalue (Lanczos, 40 "
        "iterations); GD at step η is stable on a quadratic only while "
        "η·λ_max/2 < 1. A rung whose seed-0 flow stalls is flown for seed 0 "
        "only.\n\n" + _docs.table(header, rows) + "\n"
    )


def main(argv=None) -> int:
    jax.config.update("jax_enable_x64", True)  # an entry point: the runs are float64
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--doc-only", action="store_true")
    args = p.parse_args(argv)
    cfg = QUICK if args.quick else Config()
    if not args.doc_only:
        run(cfg)
    _docs.publish(block(cfg), quick=args.quick, doc=DOC, start=START, end=END)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
