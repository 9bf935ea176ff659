"""``gflow train``: train a deep Transformer with optax; find per-head stages."""

from __future__ import annotations

import time

from gflow.cli.common import (
    add_out_option,
    default_out,
    load_config_file,
    run_dir_arg,
    start_log,
)
from gflow.cli.errors import UsageError

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
        "run continues with --resume RUN_DIR.",
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
    p.set_defaults(handler=run)


def _resolve(args):
    """TrainConfig from the defaults and the options, or from --resume's run."""
    from gflow.runs.train_run import TrainConfig

    given = [f for f in (*_OPTIONS, *_FLAGS) if getattr(args, f) is not None]
    settings = {f: getattr(args, f) for f in given}
    if args.resume is not None:
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
    try:
        return TrainConfig(**settings)
    except (TypeError, ValueError) as e:
        raise UsageError(str(e)) from None


def run(args) -> int:
    cfg = _resolve(args)
    import jax

    jax.config.update("jax_enable_x64", cfg.x64)  # entry point: precision chosen here
    from gflow.plotting.figures import train_figures
    from gflow.runs.train_run import (
        prepare,
        run_train,
        write_train_config,
        write_train_run,
    )

    out = args.resume or args.out or default_out("train")
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
