"""``gflow flow``: the default Markov population flow as a resumable run directory."""

from __future__ import annotations

import time
from pathlib import Path

from gflow.cli.common import (
    add_out_option,
    default_out,
    floats,
    load_config_file,
    run_dir_arg,
    start_log,
)
from gflow.cli.errors import UsageError

# option -> FlowConfig field, for the settings a user can give on the command line
_OPTIONS = {
    "t1": ("--t1", float, "final flow time"),
    "init_scale": ("--init-scale", float, "std of the initial weights ε"),
    "seed": ("--seed", int, "PRNG seed of the initial weights"),
    "pi": ("--pi", floats, "stationary distribution, comma-separated"),
    "lam": ("--lam", float, "repeat probability λ"),
    "d_model": ("--d-model", int, "width m"),
    "tau": ("--tau", float, "softmax scale τ"),
    "solver": ("--solver", str, None),
    "rtol": ("--rtol", float, "relative tolerance"),
    "atol": ("--atol", float, "absolute tolerance"),
    "max_steps": ("--max-steps", int, "solver step budget"),
    "num_saves": ("--num-saves", int, "number of saved times"),
    "segments": ("--segments", int, "checkpointed pieces of [0, t1]"),
}


def register(sub) -> None:
    from gflow.runs.flow_run import SOLVERS, FlowConfig

    d = FlowConfig()
    p = sub.add_parser(
        "flow",
        help="integrate the default Markov population flow and write a run directory",
        description="Integrate dθ/dt = -∇L(θ) for the population loss of a Markov "
        "chain (MODEL.md §3-4); write config.json, metrics, parameters and figures. "
        "The flow is checkpointed after each segment: an interrupted run continues "
        "with --resume RUN_DIR.",
    )
    add_out_option(p, "flow")
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        help="JSON file of settings (a run's config.json works); options override it",
    )
    p.add_argument(
        "--resume",
        type=run_dir_arg,
        default=None,
        metavar="RUN_DIR",
        help="continue an interrupted run from its last checkpoint",
    )
    for field, (flag, typ, text) in _OPTIONS.items():
        if field == "solver":
            text = f"one of {', '.join(SOLVERS)}"
        default = getattr(d, field)
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        p.add_argument(flag, type=typ, default=None, help=f"{text} (default {shown})")
    p.add_argument(
        "--unfactorised",
        action="store_true",
        default=None,
        help="one m×m W_A instead of W_Q W_Kᵀ (ablation)",
    )
    p.add_argument(
        "--residual", action="store_true", default=None, help="residual ablation"
    )
    p.add_argument("--float32", action="store_true", help="float32 (default float64)")
    p.add_argument(
        "--no-figures",
        action="store_true",
        help="write the run's data only, no PNG figures (drawing them takes about "
        "as long as a short flow)",
    )
    p.add_argument(
        "--no-params",
        action="store_true",
        default=None,
        help="do not keep parameter snapshots (flow_params.eqx) at the saved times",
    )
    p.set_defaults(handler=run)


def _resolve(args):
    """FlowConfig from, in order: defaults, --config / --resume file, options."""
    from gflow.runs.flow_run import FlowConfig

    settings = {}
    if args.resume is not None:
        if args.config is not None:
            raise UsageError("give --resume or --config, not both")
        if not (args.resume / "config.json").exists():
            raise UsageError(
                f"--resume: {args.resume} has no config.json; give the directory of "
                "an earlier 'gflow flow' run"
            )
        settings = load_config_file(
            args.resume / "config.json", FlowConfig, option="--resume"
        )
        given = [_OPTIONS[f][0] for f in _OPTIONS if getattr(args, f) is not None]
        given += [
            f"--{flag.replace('_', '-')}"
            for flag in ("unfactorised", "residual", "float32", "no_params")
            if getattr(args, flag)
        ]
        if given:
            raise UsageError(
                f"--resume continues a run as configured; drop {', '.join(given)}"
            )
    elif args.config is not None:
        settings = load_config_file(args.config, FlowConfig)
    for field in _OPTIONS:
        if getattr(args, field) is not None:
            settings[field] = getattr(args, field)
    if args.unfactorised:
        settings["factorised"] = False
    if args.residual:
        settings["residual"] = True
    if args.float32:
        settings["x64"] = False
    if args.no_params:
        settings["save_params"] = False
    if "pi" in settings:
        settings["pi"] = tuple(settings["pi"])
    try:
        return FlowConfig(**settings)
    except (TypeError, ValueError) as e:
        raise UsageError(str(e)) from None


def _program_cache(args):
    """The traced-program cache beside the compilation cache, when that one is on."""
    folder = getattr(args, "compile_cache", None)
    if folder is None:
        return None
    from gflow.runs.program_cache import ProgramCache

    return ProgramCache(folder / "programs")


def run(args) -> int:
    cfg = _resolve(args)
    import jax

    jax.config.update("jax_enable_x64", cfg.x64)  # entry point: x64 is chosen here
    from gflow.runs.flow_run import run_flow, write_config, write_flow_run

    out = args.resume or args.out or default_out("flow")
    start_log(out)
    if args.resume is None:
        write_config(out, cfg)
    start = time.perf_counter()
    traj = run_flow(
        cfg,
        progress=False if args.quiet else None,
        checkpoint_dir=out / "checkpoint",
        program_cache=_program_cache(args),
    )
    stages = write_flow_run(out, cfg, traj)
    if not args.no_figures:
        from gflow.plotting.figures import flow_figures  # matplotlib: only if drawn

        flow_figures(out, cfg, traj, stages)
    run_dir = out
    s = traj.stats
    resumed = traj.info.get("resumed_from_segment", -1)
    print(
        f"flow {traj.status}: t={s['t_reached']:g}, "
        f"loss={traj.metrics['loss'][-1]:.6f}, "
        f"{s['num_steps']} steps ({s['num_rejected_steps']} rejected)"
        + (
            f", resumed after segment {resumed + 1}/{cfg.segments}"
            if resumed >= 0
            else ""
        )
        + f", {time.perf_counter() - start:.1f} s -> {run_dir}"
    )
    return 0 if traj.status == "success" else 1
