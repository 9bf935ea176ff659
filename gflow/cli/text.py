"""``gflow text``: attention dynamics on natural text (issue 6), as a run directory."""

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
from gflow.cli.processes import add_process_options, plan


def register(sub) -> None:
    from gflow.runs.flow_run import SOLVERS
    from gflow.runs.text_config import (
        METHODS,
        MODELS,
        OPTIMIZER_NAMES,
        TOKENIZER_NAMES,
        TextConfig,
    )
    from gflow.text.fullbatch import SCHEDULES
    from gflow.text.subword import WHITESPACE_MODES

    d = TextConfig(corpus="-")
    p = sub.add_parser(
        "text",
        help="train on a text corpus (GD or flow, and an optimizer) and track "
        "attention rows",
        description="Tokenise a corpus, cut a fixed sample of windows, follow the "
        "gradient flow with small-step GD (or Tsit5) and run a practical optimizer "
        "(Adam by default; SGD, AdamW, schedules, clipping) from the same init, for "
        "one seed or several; write config.json, vocab.json, metrics, the tracked "
        "queries' attention rows, stages.json (and, for several seeds, "
        "stages_summary.json) and figures. Every run is on the clock t = Σ η_k.",
    )
    p.add_argument(
        "--corpus",
        default=None,
        help="a text file or folder, or 'wikitext' / 'tinystories' with --download "
        "(required unless --resume)",
    )
    p.add_argument(
        "--download",
        action="store_true",
        help="allow fetching a hub corpus (needs pip install gflow[hf] and network)",
    )
    add_out_option(p, "text")
    p.add_argument(
        "--resume",
        type=run_dir_arg,
        default=None,
        metavar="RUN_DIR",
        help="continue an interrupted run as configured in RUN_DIR/config.json, with "
        "its tokenizer.json; every run that had finished is read back",
    )
    p.add_argument(
        "--vocab-size",
        type=int,
        default=d.vocab_size,
        help="V: kept types (word, byte), or the pieces a subword tokeniser trains",
    )
    p.add_argument(
        "--tokenizer",
        default=d.tokenizer,
        help=f"one of {', '.join(TOKENIZER_NAMES)}; bpe and unigram are trained on "
        "the corpus (offline; needs pip install 'gflow[text]') and saved as "
        "tokenizer.json",
    )
    p.add_argument(
        "--whitespace",
        default=d.whitespace,
        help=f"subword spaces: one of {', '.join(WHITESPACE_MODES)} (the piece ▁ on "
        "its own, or glued to the next word as in SentencePiece)",
    )
    p.add_argument(
        "--tokenizer-file",
        default=None,
        help="reuse a trained subword tokeniser (an earlier run's tokenizer.json) "
        "instead of training one",
    )
    p.add_argument("--max-chars", type=int, default=None, help="use the start only")
    p.add_argument("--context", type=int, default=d.context, help="window length s")
    p.add_argument("--windows", type=int, default=d.windows, help="fixed sample size")
    p.add_argument("--d-model", type=int, default=d.d_model, help="width m")
    p.add_argument(
        "--model",
        default=d.model,
        help=f"one of {', '.join(MODELS)}: the one-layer attention model, or the deep "
        "gflow.Transformer (--layers, --heads; per-head observables, no row figures)",
    )
    p.add_argument("--layers", type=int, default=d.layers, help="transformer depth")
    p.add_argument(
        "--heads", type=int, default=d.heads, help="transformer heads per layer"
    )
    p.add_argument("--init-scale", type=float, default=d.init_scale)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--seeds",
        type=int,
        default=d.seeds,
        help="run seeds --seed .. --seed + K - 1 (init and batches), compiled once; "
        "runs named <run>_s<seed>, stage times as mean ± sd in stages_summary.json",
    )
    p.add_argument(
        "--method",
        default=d.method,
        help=f"one of {', '.join(METHODS)}: full-batch GD of step --lr (default; "
        "cheap and close to the flow at small steps) or the Tsit5 flow (float64)",
    )
    p.add_argument("--lr", type=float, default=d.lr, help="GD step (flow: t1/steps)")
    p.add_argument("--steps", type=int, default=d.steps, help="GD steps")
    p.add_argument("--rtol", type=float, default=d.rtol)
    p.add_argument(
        "--solver",
        default=d.solver,
        help=f"the flow's solver (--method flow): one of {', '.join(SOLVERS)}; rkc2 "
        "or stiff where the loss is stiff",
    )
    p.add_argument("--atol", type=float, default=d.atol)
    p.add_argument(
        "--optimizer",
        default=d.optimizer,
        help=f"the second run: one of {', '.join(OPTIMIZER_NAMES)}; gd on the fixed "
        "sample (--batch 0), sgd the same update on fresh minibatches (--batch > 0), "
        "adam and adamw either way",
    )
    p.add_argument(
        "--opt-lr",
        "--adam-lr",
        dest="opt_lr",
        type=float,
        default=d.opt_lr,
        help="its step size (a schedule's peak)",
    )
    p.add_argument(
        "--opt-steps",
        "--adam-steps",
        dest="opt_steps",
        type=int,
        default=d.opt_steps,
        help="its steps; 0: no second run",
    )
    p.add_argument(
        "--batch",
        "--adam-batch",
        dest="batch",
        type=int,
        default=d.batch,
        help="0: the fixed sample (full batch); else this many fresh random windows "
        "each step",
    )
    p.add_argument(
        "--schedule",
        default=d.schedule,
        help=f"one of {', '.join(SCHEDULES)}: warmup-cosine rises linearly from 0 to "
        "--opt-lr over the --warmup fraction of the steps, then falls as a cosine to "
        "--final-lr",
    )
    p.add_argument(
        "--warmup",
        type=float,
        default=d.warmup,
        help="warmup fraction of the steps, in [0, 1) (warmup-cosine)",
    )
    p.add_argument(
        "--final-lr",
        type=float,
        default=d.final_lr,
        help="the step size the cosine falls to at the end of the run (warmup-cosine)",
    )
    p.add_argument(
        "--weight-decay",
        type=float,
        default=d.weight_decay,
        help="AdamW's decoupled weight decay (adamw only)",
    )
    p.add_argument(
        "--clip",
        type=float,
        default=d.clip,
        help="clip each gradient to this global norm (0: off)",
    )
    p.add_argument(
        "--all-positions", action="store_true", help="causal loss at every position"
    )
    p.add_argument(
        "--positional", action="store_true", help="learned positional encoding"
    )
    p.add_argument(
        "--track",
        default="",
        help="comma-separated query tokens to track (besides the automatic ones)",
    )
    p.add_argument("--num-queries", type=int, default=d.num_queries)
    p.add_argument(
        "--row-windows",
        type=int,
        default=d.row_windows,
        help="a tracked row is measured on the fixed sample and this many more "
        "windows ending at its query, spread over the corpus (0: the sample only)",
    )
    p.add_argument("--topk", type=int, default=d.topk)
    p.add_argument("--num-saves", type=int, default=d.num_saves)
    p.add_argument(
        "--sharpness-checks",
        type=int,
        default=d.sharpness_checks,
        help="GD: λ_max of the loss Hessian (Lanczos) at this many saves, reported as "
        "η·λ_max/2 with a warning above 1/2 (not a flow proxy there); 0: off",
    )
    p.add_argument("--float64", action="store_true", help="float64 (flow: always)")
    add_process_options(p)  # the seeds split over the processes
    p.set_defaults(handler=run)


def _settings(args) -> dict:
    """The TextConfig fields the options give."""
    return dict(
        corpus=args.corpus,
        vocab_size=args.vocab_size,
        tokenizer=args.tokenizer,
        whitespace=args.whitespace,
        tokenizer_file=args.tokenizer_file,
        max_chars=args.max_chars,
        download=args.download,
        context=args.context,
        windows=args.windows,
        d_model=args.d_model,
        model=args.model,
        layers=args.layers,
        heads=args.heads,
        init_scale=args.init_scale,
        seed=args.seed,
        method=args.method,
        lr=args.lr,
        steps=args.steps,
        rtol=args.rtol,
        atol=args.atol,
        solver=args.solver,
        optimizer=args.optimizer,
        opt_lr=args.opt_lr,
        opt_steps=args.opt_steps,
        batch=args.batch,
        schedule=args.schedule,
        warmup=args.warmup,
        final_lr=args.final_lr,
        weight_decay=args.weight_decay,
        clip=args.clip,
        seeds=args.seeds,
        all_positions=args.all_positions,
        positional=args.positional,
        track=tuple(t for t in args.track.split(",") if t),
        num_queries=args.num_queries,
        row_windows=args.row_windows,
        topk=args.topk,
        num_saves=args.num_saves,
        sharpness_checks=args.sharpness_checks,
        x64=args.float64 or args.method == "flow",
    )


def _resume_settings(args, settings: dict) -> dict:
    """The settings of ``--resume``'s config.json, its tokeniser read from the run's
    tokenizer.json; refuses options that would change the run."""
    from gflow.runs.text_config import TextConfig
    from gflow.text.subword import KINDS

    run_dir = args.resume
    if not (run_dir / "config.json").exists():
        raise UsageError(
            f"--resume: {run_dir} has no config.json; give the directory of an "
            "earlier 'gflow text' run"
        )
    default = TextConfig(corpus="-")
    given = [
        "--" + {"x64": "float64"}.get(k, k).replace("_", "-")
        for k, v in settings.items()
        if v != (None if k == "corpus" else getattr(default, k))
    ]
    given += ["--out"] if args.out is not None else []
    if given:
        raise UsageError(
            f"--resume continues a run as configured; drop {', '.join(given)}"
        )
    saved = load_config_file(run_dir / "config.json", TextConfig, option="--resume")
    saved["track"] = tuple(saved.get("track", ()))
    if saved.get("tokenizer") in KINDS:
        tokenizer = run_dir / "tokenizer.json"
        if not tokenizer.exists():
            raise UsageError(
                f"--resume: {run_dir} has no tokenizer.json (its {saved['tokenizer']} "
                "tokeniser); the run cannot be rebuilt as it was"
            )
        saved["tokenizer_file"] = str(tokenizer)
    return saved


def run(args) -> int:
    from gflow.runs.text_config import TextConfig

    how = plan(args)
    settings = _settings(args)
    if args.resume is not None:
        settings = _resume_settings(args, settings)
    elif settings["corpus"] is None:
        raise UsageError("give --corpus (a text file or folder), or --resume RUN_DIR")
    try:
        cfg = TextConfig(**settings)
    except (TypeError, ValueError) as e:
        raise UsageError(str(e)) from None
    from gflow.cli.text_processes import launch_or_join

    out = args.resume or args.out or default_out("text")
    status, processes = launch_or_join(args, cfg, how, out)
    if status is not None:  # the workers ran it
        return status
    from gflow.cli.text_processes import prepare_everywhere, run_spread
    from gflow.plotting.text import plot_attention_rows, plot_text_summary
    from gflow.runs.files import read_json
    from gflow.runs.text_files import write_text_run
    from gflow.runs.text_pieces import RunPieces
    from gflow.runs.text_run import run_text
    from gflow.runs.text_seeds import stages_summary, stages_table
    from gflow.text.row_phases import describe
    from gflow.text.stability import stability_line, stability_warning

    main = processes is None or processes.main
    start = time.perf_counter()
    data = prepare_everywhere(cfg, out, processes)
    names = ", ".join(repr(data.vocab.tokens[q]) for q in data.queries)
    if main and not args.quiet:
        print(
            f"{len(data.ids)} tokens, d={len(data.vocab)} types "
            f"(unknown {data.vocab.frequencies[data.vocab.unk_id]:.1%}); "
            f"tracking {names}"
        )
    if main:
        start_log(out)
    wall = {"prepare": time.perf_counter() - start}
    total = len(cfg.seed_list) * len(cfg.base_names)
    done = []

    def report(name, traj, resumed):
        done.append(name)
        if main and not args.quiet:
            how = "read back" if resumed else f"{traj.stats['wall_s']:.1f} s"
            print(f"[{len(done)}/{total}] {name} {traj.status} ({how})", flush=True)

    if processes is None:
        runs = run_text(cfg, data, pieces=RunPieces(out, cfg, data), report=report)
    else:
        runs = run_spread(cfg, data, out, processes, report)
        if runs is None:  # not process 0: its runs are saved
            return 0
    wall["runs"] = time.perf_counter() - start - sum(wall.values())
    write_text_run(out, cfg, data, runs)
    wall["save"] = time.perf_counter() - start - sum(wall.values())
    if cfg.model == "attention":  # a Transformer has no attention rows
        for name in runs:
            plot_attention_rows(out, name)
        plot_text_summary(out, list(cfg.run_names(cfg.seed)))  # the first seed's
    wall["figures"] = time.perf_counter() - start - sum(wall.values())
    for name, traj in runs.items():
        st = traj.stats
        print(
            f"{name} {traj.status}: t={traj.t[-1]:g}, "
            f"loss {traj.metrics['loss'][0]:.4f} -> {traj.metrics['loss'][-1]:.4f}, "
            f"{st['wall_s']:.1f} s (loop {st['loop_s']:.1f} s, "
            f"observables {st['observe_s']:.1f} s)"
        )
        if "stability" in traj.info:
            check = traj.info["stability"]
            print(f"  {stability_line(check)} ({st['sharpness_s']:.1f} s)")
            warning = stability_warning(name, check)
            if warning:
                print(warning)
    if (out / "row_phases.json").exists():  # the first seed's runs
        phases = read_json(out / "row_phases.json")
        print("what each tracked row does (gflow.text.row_phases):")
        for name in cfg.run_names(cfg.seed):
            for query, moves in phases.get(name, {}).items():
                print(f"  {name} {query!r}: {describe(moves)}")
    if cfg.seeds > 1:
        print(stages_table(stages_summary(cfg, read_json(out / "stages.json"))))
    parts = ", ".join(f"{k} {v:.1f} s" for k, v in wall.items())
    print(f"wrote {out} in {sum(wall.values()):.1f} s ({parts})")
    return 0 if all(t.status == "success" for t in runs.values()) else 1
