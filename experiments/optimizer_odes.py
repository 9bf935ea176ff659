"""Do heavy ball and Adam converge to their ODEs as η → 0, and at which order?

Question: with β = 1 − γη (the memory time 1/γ fixed in flow time, see
``gflow.dynamics.references.optimizer_odes``), heavy ball in EMA form
(optax ``sgd(learning_rate=η(1 − β),
momentum=β)``) and Adam (optax ``adam(b1=1 − γ₁η, b2=1 − γ₂η)``) are first-order
discretisations of ``MomentumODEReference`` and ``AdamODEReference``. Measure
error(η) = max_t |θ_η(t) − θ_ODE(t)| over a grid of η and fit the order (expected ≈ 1).

Command:
    PYTHONPATH=$PWD python experiments/optimizer_odes.py [--out DIR] [--only adam]
        [--adam-t1 20 --adam-lrs 0.2,0.1,0.05,0.025]

Runtime: about 3-5 min on 2 busy CPU cores. Writes
experiments/results/optimizer_odes/{results.json, orders.md}.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import optax  # noqa: E402

from gflow import PopulationLoss  # noqa: E402
from gflow.analysis import compare_sweep  # noqa: E402
from gflow.dynamics import run_sweep  # noqa: E402
from gflow.dynamics.references import AdamODEReference, MomentumODEReference  # noqa: E402
from gflow.runs import FlowConfig  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Config:
    momentum_lrs: tuple[float, ...] = (0.2, 0.1, 0.05, 0.025)
    momentum_t1: float = 60.0
    # Adam's sign-like steps move all ~2300 coordinates at unit speed and the
    # attention collapse amplifies differences: only a short horizon is asymptotic
    adam_lrs: tuple[float, ...] = (0.02, 0.01, 0.005, 0.0025)
    adam_t1: float = 0.5
    gamma: float = 1.0  # heavy ball: β = 1 − γη
    gamma1: float = 1.0  # Adam: β₁ = 1 − γ₁η
    gamma2: float = 0.1  # Adam: β₂ = 1 − γ₂η
    num_saves: int = 101


def cases(cfg: Config):
    inj = optax.inject_hyperparams
    return {
        "momentum": (
            inj(optax.sgd)(learning_rate=0.1, momentum=0.9),
            MomentumODEReference(gamma=cfg.gamma),
            cfg.momentum_lrs,
            cfg.momentum_t1,
        ),
        "adam": (
            inj(optax.adam)(learning_rate=0.1, b1=0.9, b2=0.999, eps=1e-8),
            AdamODEReference(gamma1=cfg.gamma1, gamma2=cfg.gamma2),
            cfg.adam_lrs,
            cfg.adam_t1,
        ),
    }


def run(cfg: Config, *, key=None, only=("momentum", "adam")) -> dict:
    """Errors per η and fitted orders of both optimizers against their ODEs."""
    flow_cfg = FlowConfig()
    loss, model = PopulationLoss(flow_cfg.chain()), flow_cfg.model()
    out = {}
    for name, (opt, ref, lrs, t1) in cases(cfg).items():
        if name not in only:
            continue
        start = time.perf_counter()
        sweep = run_sweep(
            loss,
            model,
            opt,
            lrs,
            t1=t1,
            num_saves=cfg.num_saves,
            hyperparams=ref.hyperparams,
        )
        res = compare_sweep(sweep, ref, loss, model)
        out[name] = {
            "t1": t1,
            "reference": dataclasses.asdict(ref),
            "order": res["order"],
            "members": res["members"],
            "seconds": time.perf_counter() - start,
        }
    return out


def table(results: dict) -> str:
    rows = [
        "| optimizer | η | β's | status | error = max_t dist to its ODE | ratio | "
        "final error |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, res in results.items():
        if name == "config":
            continue
        ref, prev = res["reference"], None
        for r in res["members"]:
            lr = r["lr"]
            if name == "momentum":
                betas = f"β={1 - ref['gamma'] * lr:.4g}"
            else:
                betas = (
                    f"β₁={1 - ref['gamma1'] * lr:.4g}, β₂={1 - ref['gamma2'] * lr:.4g}"
                )
            ratio = "" if prev is None else f"{prev / r['error']:.3g}"
            prev = r["error"]
            rows.append(
                f"| {name} (t1={res['t1']:g}) | {lr:g} | {betas} | {r['status']} | "
                f"{r['error']:.4g} | {ratio} | {r['final_error']:.4g} |"
            )
        rows.append(f"| {name}: fitted order | **{res['order']:.3f}** | | | | | |")
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path("experiments/results/optimizer_odes")
    )
    parser.add_argument("--only", default="momentum,adam", help="optimizers")
    parser.add_argument("--adam-t1", type=float, default=Config.adam_t1)
    parser.add_argument("--adam-lrs", default=None, help="comma-separated")
    args = parser.parse_args()
    cfg = Config(adam_t1=args.adam_t1)
    if args.adam_lrs:
        lrs = tuple(float(x) for x in args.adam_lrs.split(","))
        cfg = dataclasses.replace(cfg, adam_lrs=lrs)
    results = run(cfg, only=tuple(args.only.split(",")))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(
        json.dumps({"config": dataclasses.asdict(cfg), **results})
    )
    (args.out / "orders.md").write_text(table(results))
    print(table(results))
    for name, res in results.items():
        print(f"{name}: order {res['order']:.3f} in {res['seconds']:.0f} s")


if __name__ == "__main__":
    main()
