"""``gflow train``: train a deep Transformer with optax; find per-head stages."""

from __future__ import annotations

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
from gflow.cli.processes import add_process_options, check_split, plan

# option -> TrainConfig field: (flag, type, help)
_OPTIONS = {
    "data": ("--data", str, "'markov' (the default chain) or a text file or folder"),
    "layers": ("--layers", int, "number of layers L"),
    "heads": ("--heads", int, "attention heads per layer H"),
    "d_model": ("--d-model", int, "width m (a multiple of --heads)"),
    "d_ff": ("--d-ff", int, "hidden width of a GeLU MLP per layer (default none)"),
    "max_len": ("--max-len", int, "learned positions up to this length (default none)"),
    "init_scale": ("--init-scale", float, "std of the initial weights"),
    "optimizer": ("--optimizer", str, None),
    "lr": ("--lr", float, "peak step size η"),
    "schedule": ("--schedule", str, None),
    "warmup": ("--warmup", float, "warmup fraction of the steps (warmup-cosine)"),
    "beta": ("--beta", float, "momentum β / Adam β₁"),
    "weight_decay": ("--weight-decay", float, "AdamW's decoupled weight decay"),
    "steps": ("--steps", int, "optimizer steps"),
    "batch": ("--batch", int, "sequences per minibatch"),
    "seq_len": ("--seq-len", int, "context length s"),
    "eval_batch": ("--eval-batch", int, "held-out sequences the metrics use"),
    "vocab_size": ("--vocab-size", int, "vocabulary of a text corpus"),
    "num_saves": ("--num-saves", int, "saved times"),
    "segments": ("--segments", int, "checkpointed pieces of the run"),
    "seed": ("--seed", int, "PRNG seed of weights, batches and the held-out sample"),
}
_FLAGS = {
    "value": "a value and an output matrix per head",
    "layernorm": "pre-LayerNorm before attention, MLP and unembedding",
    "residual": "residual streams",
    "x64": "float64 (default float32)",
}


def register(sub) -> None:
    from gflow.dynamics.optimizers import OPTIMIZERS
    from gflow.runs.train_run import SCHEDULES, TrainConfig

    d = TrainConfig()
    p = sub.add_parser(
        "train",
        help="train a multi-layer, multi-head Transformer and find per-head stages",
        description="Train a causal Transformer with an optax optimizer on fresh "
        "minibatches (Markov sequences or a text corpus) on the shared clock "
        "t = Σ η; record the loss and per-head attention observables on a held-out "
        "sample; write config.json, metrics, parameter snapshots, per-head "
        "stages.json and figures. Checkpointed after each segment: an interrupted "
        "run continues with --resume RUN_DIR. --seeds and --lrs train one member "
        "per seed and step size into one run directory, over several processes "
        "with --processes.",
    )
    add_out_option(p, "train")
    p.add_argument(
        "--resume",
        type=run_dir_arg,
        default=None,
        metavar="RUN_DIR",
        help="continue an interrupted run from its last checkpoint",
    )
    choices = {"optimizer": ", ".join(OPTIMIZERS), "schedule": ", ".join(SCHEDULES)}
    for field, (flag, typ, text) in _OPTIONS.items():
        text = text or f"one of {choices[field]}"
        p.add_argument(
            flag, type=typ, default=None, help=f"{text} (default {getattr(d, field)})"
        )
    for field, text in _FLAGS.items():
        flag = "--float64" if field == "x64" else f"--{field}"
        p.add_argument(flag, dest=field, action="store_true", default=None, help=text)
    p.add_argument(
        "--seeds",
        type=int,
        default=None,
        metavar="K",
        help="train seeds --seed .. --seed + K - 1, one member each, named "
        "train_s<seed>; stage times as mean ± sd in stages_summary.json",
    )
    p.add_argument(
        "--lrs",
        type=floats,
        default=None,
        help="train one member per peak step size (comma-separated; instead of "
        "--lr), named train_lr<η>",
    )
    add_process_options(p)
    p.set_defaults(handler=run)


def _resolve(args):
    """(TrainConfig, TrainSweep) from the defaults and the options, or from
    --resume's run."""
    from gflow.runs.train_run import TrainConfig
    from gflow.runs.train_sweep import TrainSweep

    given = [f for f in (*_OPTIONS, *_FLAGS) if getattr(args, f) is not None]
    settings = {f: getattr(args, f) for f in given}
    members = {"seeds": 1 if args.seeds is None else args.seeds, "lrs": args.lrs}
    if args.resume is not None:
        given += [f for f in ("seeds", "lrs") if getattr(args, f) is not None]
        if given:
            flags = [_OPTIONS[f][0] if f in _OPTIONS else f"--{f}" for f in given]
            raise UsageError(
                f"--resume continues a run as configured; drop {', '.join(flags)}"
            )
        if not (args.resume / "config.json").exists():
            raise UsageError(
                f"--resume: {args.resume} has no config.json; give the directory of "
                "an earlier 'gflow train' run"
            )
        settings = load_config_file(
            args.resume / "config.json", TrainConfig, option="--resume"
        )
        settings["pi"] = tuple(settings.get("pi", TrainConfig.pi))
        members = _saved_sweep(args.resume / "config.json")
    elif args.lrs is not None and args.lr is not None:
        raise UsageError("--lr and --lrs: give one step size or a list, not both")
    try:
        cfg = TrainConfig(**settings)
        sweep = TrainSweep(**members)
        sweep.members(cfg)  # seeds within range
        return cfg, sweep
    except (TypeError, ValueError) as e:
        raise UsageError(str(e)) from None


def _saved_sweep(path) -> dict:
    """The ``sweep`` settings of a run's config.json (none: one run)."""
    import json

    from gflow.cli.common import check_settings
    from gflow.runs.train_sweep import TrainSweep

    doc = json.loads(path.read_text())
    saved = doc.get("sweep") if isinstance(doc, dict) else None
    if saved is None:
        return {}
    source = f"--resume: config file {path}"
    if not isinstance(saved, dict):
        raise UsageError(f"{source}: setting sweep must be a JSON object of settings")
    check_settings(saved, TrainSweep, source, prefix="sweep.")
    if saved.get("lrs") is not None:
        saved["lrs"] = tuple(saved["lrs"])
    return saved


def worker_args(cfg, sweep, run_dir) -> list[str]:
    """The options that make a worker run ``cfg`` and ``sweep`` into ``run_dir``
    (a new run; settings without an option are at their defaults there)."""
    argv = []
    for field, (flag, typ, _) in _OPTIONS.items():
        value = getattr(cfg, field)
        if value is not None and not (field == "lr" and sweep.lrs is not None):
            argv += [flag, repr(value) if typ is float else str(value)]
    for field in _FLAGS:
        if getattr(cfg, field):
            argv.append("--float64" if field == "x64" else f"--{field}")
    argv += ["--seeds", str(sweep.seeds)]
    if sweep.lrs is not None:
        argv += ["--lrs", ",".join(map(repr, sweep.lrs))]
    return [*argv, "--out", str(run_dir)]


def run(args) -> int:
    how = plan(args)
    cfg, sweep = _resolve(args)
    members = len(sweep.members(cfg))
    if how.local or how.join:
        flag = "--processes" if how.local else "--num-processes"
        check_split(members, how.count, f"{flag} {how.count}", "--seeds K, --lrs")
    if how.join and args.resume is None and args.out is None:
        raise UsageError(
            "--coordinator: give --out DIR (on a filesystem that every process "
            "shares): the default runs/train-<time> differs between processes"
        )
    out = args.resume or args.out or default_out("train")
    if how.local:
        from gflow.cli.launch import launch

        own = ["--resume", str(out)] if args.resume else worker_args(cfg, sweep, out)
        flags = ["--quiet"] * args.quiet + ["--debug"] * args.debug
        return launch(
            "train", own, how.count, out, global_args=flags, timeout=how.timeout,
            saved="the segments finished so far are saved",
        )  # fmt: skip
    import jax

    jax.config.update("jax_enable_x64", cfg.x64)  # entry point: precision chosen here
    processes = None
    if how.join:
        from gflow.cli.processes import join

        processes = join(how, "train")
        if how.coordinator == "auto":  # the count came from the scheduler
            what = f"--coordinator auto ({processes.count} processes)"
            check_split(members, processes.count, what, "--seeds K, --lrs")
    if sweep.is_sweep or processes is not None:
        from gflow.cli.train_members import run_sweep

        return run_sweep(args, cfg, sweep, out, processes)
    return _run_one(args, cfg, out)


def _run_one(args, cfg, out) -> int:
    """One run, in today's layout: train.json, stages.json, figures."""
    from gflow.plotting.figures import train_figures
    from gflow.runs.train_run import (
        prepare,
        run_train,
        write_train_config,
        write_train_run,
    )

    start = time.perf_counter()
    try:
        data = prepare(cfg)
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(f"data: {e}") from None
    start_log(out)
    if args.resume is None:
        write_train_config(out, cfg, data)
    bar = None
    if not args.quiet:
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.segments, desc="train segments", unit="segment")

    def progress(i, n, resumed):
        if bar is not None:
            bar.update(1)

    try:
        traj = run_train(
            cfg, data, checkpoint_dir=out / "checkpoint", progress=progress
        )
    finally:
        if bar is not None:
            bar.close()
    stages = write_train_run(out, traj)
    train_figures(out, cfg, data, traj, stages)
    loss = traj.metrics["loss"]
    resumed = traj.stats["resumed_pieces"]
    heads = {(s.layer, s.head) for s in stages if s.layer >= 0}
    print(
        f"train {cfg.optimizer} {traj.status}: t={traj.t[-1]:.4g}, "
        f"loss {loss[0]:.4f} -> {loss[-1]:.4f}, {len(stages)} stages in "
        f"{len(heads)} heads"
        + (f", {resumed} segment(s) resumed" if resumed else "")
        + f", {time.perf_counter() - start:.1f} s -> {out}"
    )
    return 0 if traj.status == "success" else 1
