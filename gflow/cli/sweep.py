"""``gflow sweep``: an optimizer at several step sizes against a reference flow."""

from __future__ import annotations

import dataclasses
import time

from gflow.cli.common import (
    add_out_option,
    default_out,
    floats,
    load_config_file,
    run_dir_arg,
    start_log,
)
from gflow.cli.errors import UsageError


def register(sub) -> None:
    from gflow.dynamics.optimizers import OPTIMIZERS
    from gflow.runs.sweep_run import REFERENCES, SweepConfig

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
        "--chunk",
        type=int,
        default=d.chunk,
        help="members per compiled program; each finished chunk is saved, so an "
        "interrupted sweep resumes after it",
    )
    add_out_option(p, "sweep")
    p.add_argument(
        "--resume",
        type=run_dir_arg,
        default=None,
        metavar="RUN_DIR",
        help="continue an interrupted sweep as configured in RUN_DIR/config.json",
    )
    p.set_defaults(handler=run)


def _resolve(args):
    """The SweepConfig of --resume's config.json, or of the options."""
    from gflow.runs.flow_run import FlowConfig
    from gflow.runs.sweep_run import SweepConfig

    try:
        if args.resume is not None:
            if not (args.resume / "config.json").exists():
                raise UsageError(
                    f"--resume: {args.resume} has no config.json; give the directory "
                    "of an earlier 'gflow sweep' run"
                )
            settings = load_config_file(
                args.resume / "config.json", SweepConfig, option="--resume"
            )
            return SweepConfig.from_dict(settings)
        return SweepConfig(
            optimizer=args.optimizer,
            lrs=tuple(args.lrs),
            t1=args.t1,
            reference=args.reference,
            num_saves=args.num_saves,
            threshold=args.threshold,
            beta=args.beta,
            sharded=not args.no_shard,
            chunk=args.chunk,
            flow=dataclasses.replace(
                FlowConfig(), init_scale=args.init_scale, seed=args.seed
            ),
        )
    except (TypeError, ValueError) as e:
        raise UsageError(str(e)) from None


def run(args) -> int:
    cfg = _resolve(args)
    import jax

    jax.config.update("jax_enable_x64", True)  # entry point: float64 references
    from gflow.plotting.figures import sweep_figures
    from gflow.runs.sweep_run import (
        run_sweep_config,
        write_sweep_config,
        write_sweep_run,
    )

    out = args.resume or args.out or default_out("sweep")
    start_log(out)
    if args.resume is None:
        write_sweep_config(out, cfg)
    start = time.perf_counter()
    result = run_sweep_config(
        cfg,
        key=jax.random.key(cfg.flow.seed),
        checkpoint_dir=out / "checkpoint",
        progress=False if args.quiet else None,
    )
    run_dir = write_sweep_run(out, cfg, result)
    sweep_figures(run_dir, cfg, result)
    for r in result["members"]:
        err = "-" if r["error"] is None else f"{r['error']:.4g}"
        dep, rise = r["departure_time"], r.get("first_rise_time")
        print(
            f"  η={r['lr']:<8g} {r['status']:<9} error={err:<10} "
            f"departure={'-' if dep is None else f'{dep:g}':<8} "
            f"first loss rise={'-' if rise is None else f'{rise:g}'}"
        )
    resumed = result["run"].info.get("resumed_chunks", 0)
    print(
        f"sweep {cfg.optimizer} vs {cfg.reference}: order {result['order']:.3f}, "
        + (f"{resumed} chunk(s) resumed, " if resumed else "")
        + f"{time.perf_counter() - start:.1f} s -> {run_dir}"
    )
    return 0
