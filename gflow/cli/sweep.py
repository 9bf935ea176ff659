"""``gflow sweep``: an optimizer at several step sizes against a reference flow."""

from __future__ import annotations

import dataclasses
import logging
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
from gflow.cli.processes import add_process_options, plan


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
        help="flow: dθ/dt = -∇L; modified: -∇(L + η/4 |∇L|²) (GD only); central: "
        "the optimizer's central flow at the edge of stability (GD: λ_max held at "
        "2/η; RMSProp: the preconditioned λ_max; momentum and Adam: a quasi-static "
        "attempt, see docs/flow_vs_optimizers.md)",
    )
    p.add_argument("--num-saves", type=int, default=d.num_saves)
    p.add_argument(
        "--threshold",
        type=float,
        default=d.threshold,
        help="distance that defines the departure time",
    )
    p.add_argument(
        "--beta",
        type=float,
        default=d.beta,
        help="momentum β / Adam β₁ / RMSProp decay",
    )
    p.add_argument(
        "--eps",
        type=float,
        default=d.eps,
        help="RMSProp's ε: the preconditioner is bounded by 1/√ε (from a small "
        "initialisation a larger ε keeps RMSProp below its edge at the start)",
    )
    p.add_argument("--init-scale", type=float, default=d.flow.init_scale)
    p.add_argument("--seed", type=int, default=d.flow.seed)
    p.add_argument(
        "--no-shard", action="store_true", help="do not shard members over devices"
    )
    p.add_argument(
        "--member-stages",
        action="store_true",
        help="per member: its own λ_max at every save (against the stability bound "
        "c/η) and its stages, in sweep.json",
    )
    p.add_argument(
        "--chunk",
        type=int,
        default=None,
        help=f"members per compiled program; each finished chunk is saved, so an "
        f"interrupted sweep resumes after it (default {d.chunk}; over N processes, "
        f"at most the members / N rounded up, so that every process has a chunk)",
    )
    add_out_option(p, "sweep")
    p.add_argument(
        "--resume",
        type=run_dir_arg,
        default=None,
        metavar="RUN_DIR",
        help="continue an interrupted sweep as configured in RUN_DIR/config.json",
    )
    add_process_options(p)
    p.set_defaults(handler=run)


def _resolve(args, processes: int = 1):
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
        chunk = args.chunk
        if chunk is None:  # every one of several processes gets a chunk
            chunk = SweepConfig.chunk
            if processes > 1:
                chunk = min(chunk, -(-len(args.lrs) // processes))
        return SweepConfig(
            optimizer=args.optimizer,
            lrs=tuple(args.lrs),
            t1=args.t1,
            reference=args.reference,
            num_saves=args.num_saves,
            threshold=args.threshold,
            beta=args.beta,
            eps=args.eps,
            sharded=not args.no_shard,
            chunk=chunk,
            member_analysis=args.member_stages,
            flow=dataclasses.replace(
                FlowConfig(), init_scale=args.init_scale, seed=args.seed
            ),
        )
    except (TypeError, ValueError) as e:
        raise UsageError(str(e)) from None


def worker_args(cfg, run_dir) -> list[str]:
    """The options that make a worker run ``cfg`` into ``run_dir`` (a new run)."""
    argv = ["--optimizer", cfg.optimizer, "--lrs", ",".join(map(repr, cfg.lrs)),
            "--t1", repr(cfg.t1), "--reference", cfg.reference,
            "--num-saves", str(cfg.num_saves), "--threshold", repr(cfg.threshold),
            "--beta", repr(cfg.beta), "--eps", repr(cfg.eps),
            "--init-scale", repr(cfg.flow.init_scale),
            "--seed", str(cfg.flow.seed), "--chunk", str(cfg.chunk),
            "--out", str(run_dir)]  # fmt: skip
    argv = argv if cfg.sharded else [*argv, "--no-shard"]
    return [*argv, "--member-stages"] if cfg.member_analysis else argv


def _check_split(cfg, count: int, what: str, resumed: bool) -> None:
    """UsageError unless each of ``count`` processes gets a chunk of ``cfg``
    (``what``: the option that set ``count``, as the message begins)."""
    chunks = -(-len(cfg.lrs) // cfg.chunk)
    if count > chunks:
        fix = "(a resumed run keeps its chunks)" if resumed else "or a smaller --chunk"
        raise UsageError(
            f"{what}: the {len(cfg.lrs)} step sizes make {chunks} chunk(s) of "
            f"--chunk {cfg.chunk}, so {count - chunks} process(es) would have none; "
            f"give at most {chunks} process(es) {fix}"
        )


def _check_run_dir(out, cfg, processes) -> None:
    """Every process sees the run directory of process 0 and runs its configuration
    (a collective: all processes call it once process 0 has written config.json)."""
    from gflow.runs.distributed import barrier, failing
    from gflow.runs.sweep_run import SweepConfig

    barrier("gflow sweep: config.json written", processes)
    try:
        theirs = load_config_file(out / "config.json", SweepConfig, option="--out")
        ok = SweepConfig.from_dict(theirs) == cfg
    except (UsageError, TypeError, ValueError):
        ok = False
    bad = failing(ok, processes)
    if bad:
        raise UsageError(
            f"--out {out}: process(es) {', '.join(map(str, bad))} of "
            f"{processes.count} do not see {out / 'config.json'} as process 0 wrote "
            "it; put the run directory on a filesystem that every process shares "
            "and start every process with the same settings"
        )


def run(args) -> int:
    how = plan(args)
    cfg = _resolve(args, how.count)
    if how.local or how.join:
        flag = "--processes" if how.local else "--num-processes"
        _check_split(cfg, how.count, f"{flag} {how.count}", args.resume is not None)
    if how.join and args.resume is None and args.out is None:
        raise UsageError(
            "--coordinator: give --out DIR (on a filesystem that every process "
            "shares): the default runs/sweep-<time> differs between processes"
        )
    out = args.resume or args.out or default_out("sweep")
    if how.local:
        from gflow.cli.launch import launch

        own = ["--resume", str(out)] if args.resume else worker_args(cfg, out)
        flags = ["--quiet"] * args.quiet + ["--debug"] * args.debug
        return launch(
            "sweep", own, how.count, out, global_args=flags, timeout=how.timeout
        )
    import jax

    jax.config.update("jax_enable_x64", True)  # entry point: float64 references
    processes = None
    if how.join:
        from gflow.cli.processes import join

        processes = join(how, "sweep")
        if how.coordinator == "auto":  # the count came from the scheduler
            cfg = _resolve(args, processes.count)
            what = f"--coordinator auto ({processes.count} processes)"
            _check_split(cfg, processes.count, what, args.resume is not None)
    from gflow.plotting.figures import sweep_figures
    from gflow.runs.sweep_run import (
        check_reference,
        compare_sweep_members,
        run_sweep_members,
        write_sweep_config,
        write_sweep_run,
    )

    if cfg.reference == "central":
        try:
            check_reference(cfg)
        except ValueError as e:
            raise UsageError(f"--reference central: {e}") from None
    main = processes is None or processes.main
    if main:
        start_log(out)
        if args.resume is None:
            write_sweep_config(out, cfg)
    if processes is not None:
        _check_run_dir(out, cfg, processes)
    start = time.perf_counter()
    members = run_sweep_members(
        cfg,
        checkpoint_dir=out / "checkpoint",
        progress=False if args.quiet else None,
        processes=processes,
    )
    members_s = time.perf_counter() - start
    if processes is not None:  # process 0 goes on alone; the others are done
        jax.distributed.shutdown()
    if not main:
        return 0
    logging.getLogger("gflow").info(
        "members: %d process(es), %.2f s", members.info["processes"], members_s
    )
    result = compare_sweep_members(cfg, members, key=jax.random.key(cfg.flow.seed))
    result["members_wall_s"] = members_s
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
        if "flow_final_error" in r:
            flow_err = r["flow_final_error"]
            print(f"    final distance to the gradient flow {flow_err:.4g}")
        if "stages" in r:
            edge = r["edge_time"]
            print(
                f"    λ_max crosses {r['edge']:.3g} at "
                f"{'-' if edge is None else f'{edge:g}'}; stages "
                + (" ".join(f"{s['stage'][0]}{s['cycle']}" for s in r["stages"]) or "-")
            )
    resumed = result["run"].info.get("resumed_chunks", 0)
    count = result["run"].info.get("processes", 1)
    print(
        f"sweep {cfg.optimizer} vs {cfg.reference}: order {result['order']:.3f}, "
        + (f"{resumed} chunk(s) resumed, " if resumed else "")
        + (f"{count} processes, " if count > 1 else "")
        + f"{time.perf_counter() - start:.1f} s -> {run_dir}"
    )
    return 0
