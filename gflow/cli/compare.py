"""``gflow compare``: one optimizer at one step size against the flow."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from gflow.cli.common import add_out_option, default_out
from gflow.cli.errors import UsageError


def register(sub) -> None:
    from gflow.dynamics.optimizers import OPTIMIZERS

    p = sub.add_parser(
        "compare",
        help="compare one optimizer at one step size with the gradient flow",
        description="Run an optax optimizer on the default Markov population loss, "
        "solve the flow at its times t = Σ η and write config.json, compare.json "
        "(distances per block, loss gap, attention drift, departure time), both "
        "trajectories and compare.png.",
    )
    p.add_argument("--optimizer", default="sgd", choices=OPTIMIZERS)
    p.add_argument("--lr", type=float, default=0.1, help="step size η")
    p.add_argument("--t1", type=float, default=60.0, help="final flow time")
    p.add_argument(
        "--beta", type=float, default=0.9, help="momentum β / Adam β₁ / RMSProp decay"
    )
    p.add_argument(
        "--eps",
        type=float,
        default=1e-8,
        help="RMSProp's ε: the preconditioner is bounded by 1/√ε (from a small "
        "initialisation a larger ε keeps RMSProp below its edge at the start)",
    )
    p.add_argument("--threshold", type=float, default=0.1)
    p.add_argument("--num-saves", type=int, default=201)
    p.add_argument(
        "--reference",
        default="flow",
        choices=("flow", "central"),
        help="'central' also compares the run with its optimizer's central flow at "
        "the edge of stability (Cohen et al. 2024: GD and RMSProp; heavy ball and "
        "Adam: a quasi-static attempt, see docs/flow_vs_optimizers.md), beside the "
        "gradient flow",
    )
    add_out_option(p, "compare")
    p.set_defaults(handler=run)


def _check(args) -> None:
    """UsageError naming the first bad option, before anything runs or is written."""
    import math

    def positive(flag, value):
        if not (math.isfinite(value) and value > 0):
            raise UsageError(f"{flag}: must be a finite number > 0, got {value}")

    positive("--t1", args.t1)
    positive("--lr", args.lr)
    if args.lr > args.t1:
        raise UsageError(
            f"--lr: step size {args.lr:g} exceeds --t1 {args.t1:g}; give a step size "
            "<= t1 (or a longer t1)"
        )
    if not 0 <= args.beta < 1:
        raise UsageError(f"--beta: must lie in [0, 1), got {args.beta}")
    positive("--threshold", args.threshold)
    if not (math.isfinite(args.eps) and args.eps >= 0):
        raise UsageError(f"--eps: must be a finite number >= 0, got {args.eps}")
    if args.num_saves < 2:
        raise UsageError(f"--num-saves: must be >= 2, got {args.num_saves}")
    from gflow.dynamics.references.central_adaptive import CENTRAL_FLOW_OPTIMIZERS

    if args.reference == "central" and args.optimizer not in CENTRAL_FLOW_OPTIMIZERS:
        raise UsageError(
            f"--reference central: no central flow for {args.optimizer}; use one of "
            f"{', '.join(CENTRAL_FLOW_OPTIMIZERS)}"
        )


def run(args) -> int:
    _check(args)
    import jax

    jax.config.update("jax_enable_x64", True)  # entry point: float64 flow
    import numpy as np

    from gflow.analysis.compare import compare
    from gflow.analysis.observables import MarkovObservables
    from gflow.dynamics.flow import solve_flow
    from gflow.dynamics.optimizer_run import run_optimizer
    from gflow.dynamics.optimizers import optimizer_named
    from gflow.plotting.sweep import plot_comparison
    from gflow.problems.losses import PopulationLoss
    from gflow.runs.environment import environment
    from gflow.runs.files import write_json
    from gflow.runs.flow_run import FlowConfig
    from gflow.runs.trajectory_files import save_trajectory

    start = time.perf_counter()
    cfg = FlowConfig()
    chain = cfg.chain()
    loss, model, obs = PopulationLoss(chain), cfg.model(), MarkovObservables(chain)
    chosen = optimizer_named(args.optimizer, args.beta, eps=args.eps)
    reference = None
    if args.reference == "central":
        from gflow.dynamics.references.central_adaptive import central_flow_of

        reference = central_flow_of(chosen)
        try:
            reference.check_start(loss, model, args.lr)
        except ValueError as e:
            raise UsageError(f"--reference central: {e}") from None
    optimizer = chosen.transform(args.lr)
    steps = max(1, round(args.t1 / args.lr))
    traj = run_optimizer(
        loss,
        model,
        optimizer,
        steps=steps,
        save_every=max(1, steps // (args.num_saves - 1)),
        observables=obs,
        save_params=True,
    )
    n = (
        len(traj)
        if traj.status == "success"
        else max(1, int(np.searchsorted(traj.t, traj.stats["diverged_time"])))
    )
    flow = solve_flow(
        loss,
        model,
        t1=max(float(traj.t[n - 1]), 1e-9),
        ts=traj.t[:n],
        rtol=1e-10,
        atol=1e-12,
        observables=obs,
        save_params=True,
        progress=False,
    )
    cmp = compare(traj, flow, threshold=args.threshold, pi=chain.pi)
    central = central_cmp = None
    if args.reference == "central":
        (central,) = reference.solve(loss, model, [traj.t[:n]], [args.lr], obs)
        central_cmp = compare(traj, central, threshold=args.threshold, pi=chain.pi)
    out = args.out or default_out("compare")
    settings = {
        k: getattr(args, k)
        for k in (
            "optimizer",
            "lr",
            "t1",
            "beta",
            "eps",
            "threshold",
            "num_saves",
            "reference",
        )
    }
    write_json(  # what load_run and gflow report read
        Path(out) / "config.json",
        {
            "command": "compare",
            "config": {**settings, "flow": dataclasses.asdict(cfg)},
            "environment": environment(),
        },
    )
    save_trajectory(out, traj, name="optimizer")
    save_trajectory(out, flow, name="flow")
    if central is not None:
        save_trajectory(out, central, name="central")
    write_json(
        Path(out) / "compare.json",
        {
            "optimizer": args.optimizer,
            "lr": args.lr,
            "beta": args.beta,
            "t1": args.t1,
            "status": traj.status,
            **{k: v for k, v in cmp.items() if k != "distance"},
            "distance": cmp["distance"],
            "central": None
            if central_cmp is None
            else {
                "error": central_cmp["error"],
                "final_error": central_cmp["final_error"],
                "departure_time": central_cmp["departure_time"],
                "lambda_max": central.metrics["lambda_max"].tolist(),
                "predicted_loss": central.metrics["predicted_loss"].tolist(),
            },
            "environment": environment(),
        },
    )
    plot_comparison(
        cmp,
        traj,
        flow,
        Path(out) / "compare.png",
        title=f"{args.optimizer} η={args.lr:g}",
    )
    dep = cmp["departure_time"]
    print(
        f"compare {args.optimizer} η={args.lr:g}: {traj.status}, max distance "
        f"{cmp['error']:.4g}, final loss gap {cmp['loss_gap'][-1]:.3g}, departure "
        f"{'-' if dep is None else f'{dep:g}'}, {time.perf_counter() - start:.1f} s "
        f"-> {out}"
    )
    if central_cmp is not None:
        print(
            f"  central flow: max distance {central_cmp['error']:.4g}, final "
            f"{central_cmp['final_error']:.4g} (gradient flow: final "
            f"{cmp['final_error']:.4g})"
        )
    return 0
