"""``gflow sweep``: an optimizer at several step sizes against a reference flow."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from ..errors import UsageError
from .common import default_out, floats


def register(sub) -> None:
    from ..sweep_run import OPTIMIZERS, REFERENCES, SweepConfig

    d = SweepConfig()
    p = sub.add_parser(
        "sweep",
        help="run an optimizer at several step sizes as one vmapped program and "
        "compare each with the flow",
        description="Run an optax optimizer at every step size of --lrs (one "
        "compiled, vmapped program) on the default Markov population loss, compare "
        "each member with a float64 reference on the clock t = kη, fit the "
        "convergence order and write sweep.json and figures.",
    )
    p.add_argument("--optimizer", default=d.optimizer, choices=OPTIMIZERS)
    p.add_argument(
        "--lrs", type=floats, default=d.lrs, help="step sizes, comma-separated"
    )
    p.add_argument("--t1", type=float, default=d.t1, help="final flow time")
    p.add_argument(
        "--reference",
        default=d.reference,
        choices=tuple(REFERENCES),
        help="flow: dθ/dt = -∇L; modified: -∇(L + η/4 |∇L|²) (GD only)",
    )
    p.add_argument("--num-saves", type=int, default=d.num_saves)
    p.add_argument(
        "--threshold",
        type=float,
        default=d.threshold,
        help="distance that defines the departure time",
    )
    p.add_argument("--beta", type=float, default=d.beta, help="momentum β / Adam β₁")
    p.add_argument("--init-scale", type=float, default=d.flow.init_scale)
    p.add_argument("--seed", type=int, default=d.flow.seed)
    p.add_argument(
        "--no-shard", action="store_true", help="do not shard members over devices"
    )
    p.add_argument(
        "--out", type=Path, default=None, help="run directory (runs/sweep-<time>)"
    )
    p.set_defaults(handler=run)


def run(args) -> int:
    from ..runs import FlowConfig
    from ..sweep_run import SweepConfig

    try:
        cfg = SweepConfig(
            optimizer=args.optimizer,
            lrs=tuple(args.lrs),
            t1=args.t1,
            reference=args.reference,
            num_saves=args.num_saves,
            threshold=args.threshold,
            beta=args.beta,
            sharded=not args.no_shard,
            flow=dataclasses.replace(
                FlowConfig(), init_scale=args.init_scale, seed=args.seed
            ),
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    import jax

    jax.config.update("jax_enable_x64", True)  # entry point: float64 references
    from ..sweep_run import run_sweep_config, write_sweep_run

    start = time.perf_counter()
    result = run_sweep_config(cfg, key=jax.random.key(cfg.flow.seed))
    run_dir = write_sweep_run(args.out or default_out("sweep"), cfg, result)
    for r in result["members"]:
        err = "-" if r["error"] is None else f"{r['error']:.4g}"
        dep = r["departure_time"]
        print(
            f"  η={r['lr']:<8g} {r['status']:<9} error={err:<10} "
            f"departure={'-' if dep is None else f'{dep:g}'}"
        )
    print(
        f"sweep {cfg.optimizer} vs {cfg.reference}: order {result['order']:.3f}, "
        f"{time.perf_counter() - start:.1f} s -> {run_dir}"
    )
    return 0
