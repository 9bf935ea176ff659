"""``gflow flow``: the default Markov population flow as a run directory."""

from __future__ import annotations

import time
from pathlib import Path

from ..errors import UsageError
from .common import default_out, floats


def register(sub) -> None:
    from ..runs import SOLVERS, FlowConfig

    d = FlowConfig()
    p = sub.add_parser(
        "flow",
        help="integrate the default Markov population flow and write a run directory",
        description="Integrate dθ/dt = -∇L(θ) for the population loss of a Markov "
        "chain (MODEL.md §3-4); write config.json, metrics, parameters and flow.png.",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="run directory (default: runs/flow-<time>)",
    )
    p.add_argument("--t1", type=float, default=d.t1, help="final flow time")
    p.add_argument(
        "--init-scale",
        type=float,
        default=d.init_scale,
        help="std of the initial weights ε",
    )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--pi",
        type=floats,
        default=d.pi,
        help="stationary distribution, comma-separated",
    )
    p.add_argument("--lam", type=float, default=d.lam, help="repeat probability λ")
    p.add_argument("--d-model", type=int, default=d.d_model, help="width m")
    p.add_argument("--tau", type=float, default=d.tau, help="softmax scale τ")
    p.add_argument(
        "--unfactorised",
        action="store_true",
        help="one m×m W_A instead of W_Q W_Kᵀ (ablation)",
    )
    p.add_argument("--residual", action="store_true", help="residual ablation")
    p.add_argument("--solver", default=d.solver, help=f"one of {', '.join(SOLVERS)}")
    p.add_argument("--rtol", type=float, default=d.rtol)
    p.add_argument("--atol", type=float, default=d.atol)
    p.add_argument("--max-steps", type=int, default=d.max_steps)
    p.add_argument("--num-saves", type=int, default=d.num_saves)
    p.add_argument(
        "--float32", action="store_true", help="run in float32 (default float64)"
    )
    p.set_defaults(handler=run)


def run(args) -> int:
    from ..runs import FlowConfig

    try:
        cfg = FlowConfig(
            pi=tuple(args.pi),
            lam=args.lam,
            d_model=args.d_model,
            init_scale=args.init_scale,
            tau=args.tau,
            factorised=not args.unfactorised,
            residual=args.residual,
            seed=args.seed,
            t1=args.t1,
            num_saves=args.num_saves,
            solver=args.solver,
            rtol=args.rtol,
            atol=args.atol,
            max_steps=args.max_steps,
            x64=not args.float32,
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    import jax

    jax.config.update("jax_enable_x64", cfg.x64)  # entry point: x64 is chosen here
    from ..runs import run_flow, write_flow_run

    out = args.out or default_out("flow")
    start = time.perf_counter()
    traj = run_flow(cfg, progress=None if not args.quiet else False)
    run_dir = write_flow_run(out, cfg, traj)
    s = traj.stats
    print(
        f"flow {traj.status}: t={s['t_reached']:g}, "
        f"loss={traj.metrics['loss'][-1]:.6f}, "
        f"{s['num_steps']} steps ({s['num_rejected_steps']} rejected), "
        f"{time.perf_counter() - start:.1f} s -> {run_dir}"
    )
    return 0 if traj.status == "success" else 1
