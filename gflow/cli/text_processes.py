"""``gflow text --seeds K`` over several processes: each process runs its share of
the seeds and saves every run the moment it ends (``gflow.runs.text_pieces``);
process 0 reads the others' runs back from the shared ``pieces/`` and alone writes
the run directory. A run is the same program on whichever process runs it, so the
runs do not depend on the number of processes."""

from __future__ import annotations

import dataclasses
import json
import logging

from gflow.cli.common import load_config_file
from gflow.cli.errors import UsageError
from gflow.cli.processes import check_split

#: What a killed worker leaves for --resume.
SAVED = "the runs finished so far are saved"


def worker_args(cfg, run_dir) -> list[str]:
    """The options that make a worker run ``cfg`` (a ``TextConfig``) into
    ``run_dir``: one per setting, each named as the setting."""
    argv = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        flag = "--float64" if f.name == "x64" else "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            argv += [flag] if value else []
        elif isinstance(value, tuple):  # the tracked tokens
            argv += [flag, ",".join(value)] if value else []
        elif value is not None:
            argv += [flag, repr(value) if isinstance(value, float) else str(value)]
    return [*argv, "--out", str(run_dir)]


def launch_or_join(args, cfg, how, out):
    """(the workers' exit status, None) after running them with ``--processes``;
    else (None, this process among the joined ones, or None for one process), with
    JAX's precision chosen (this is the entry point)."""
    if how.local or how.join:
        flag = "--processes" if how.local else "--num-processes"
        check_split(cfg.seeds, how.count, f"{flag} {how.count}", "--seeds K")
        if how.join and args.resume is None and args.out is None:
            raise UsageError(
                "--coordinator: give --out DIR (on a filesystem that every process "
                "shares): the default runs/text-<time> differs between processes"
            )
    if how.local:
        from gflow.cli.launch import launch

        own = ["--resume", str(out)] if args.resume else worker_args(cfg, out)
        flags = ["--quiet"] * args.quiet + ["--debug"] * args.debug
        status = launch(
            "text", own, how.count, out, global_args=flags, timeout=how.timeout,
            saved=SAVED,
        )  # fmt: skip
        return status, None
    import jax

    jax.config.update("jax_enable_x64", cfg.x64)  # entry point: x64 is chosen here
    if not how.join:
        return None, None
    from gflow.cli.processes import join

    processes = join(how, "text")
    if how.coordinator == "auto":  # the count came from the scheduler
        what = f"--coordinator auto ({processes.count} processes)"
        check_split(cfg.seeds, processes.count, what, "--seeds K")
    return None, processes


def _comparable(cfg) -> dict:
    """A configuration as config.json holds it, less where the tokeniser was read
    from (a resumed run reads it from its tokenizer.json)."""
    from gflow.runs.files import to_json

    settings = json.loads(to_json(dataclasses.asdict(cfg), indent=None))
    return {
        k: v for k, v in settings.items() if k not in ("tokenizer_file", "download")
    }


def _same_config(out, cfg) -> bool:
    from gflow.runs.text_config import TextConfig

    theirs = load_config_file(out / "config.json", TextConfig, option="--out")
    return _comparable(TextConfig(**{**theirs, "track": tuple(theirs["track"])})) == (
        _comparable(cfg)
    )


def prepare_everywhere(cfg, out, processes):
    """The run's data in every process: process 0 prepares it and writes the files
    known before the runs (config.json, the trained tokeniser); after a barrier the
    others check that they see them and run the same configuration, and prepare the
    data with process 0's tokeniser (a subword tokeniser is trained once)."""
    from gflow.cli.processes import check_run_dir
    from gflow.runs.text_files import write_text_start
    from gflow.runs.text_run import prepare
    from gflow.text.subword import KINDS

    data = None
    if processes is None or processes.main:
        data = prepare(cfg)
        write_text_start(out, cfg, data)
    if processes is not None:
        check_run_dir(out, lambda: _same_config(out, cfg), processes, "text")
        if not processes.main:
            mine = cfg
            if cfg.tokenizer in KINDS and cfg.tokenizer_file is None:
                mine = dataclasses.replace(
                    cfg, tokenizer_file=str(out / "tokenizer.json")
                )
            data = prepare(mine)
    return data


def run_spread(cfg, data, out, processes, report):
    """This process's seeds; then, on process 0, every run read back from the
    shared pieces (None on the other processes)."""
    import jax

    from gflow.runs.distributed import deal, total
    from gflow.runs.text_pieces import RunPieces
    from gflow.runs.text_run import run_text

    pieces = RunPieces(out, cfg, data)
    owner = dict(zip(cfg.seed_list, deal(cfg.seeds, processes.count)))
    mine = [s for s in cfg.seed_list if owner[s] == processes.index]
    run_text(cfg, data, pieces=pieces, report=report, seeds=mine)
    total(0, processes)  # every process has saved its runs once this returns
    jax.distributed.shutdown()  # process 0 goes on alone; the others are done
    if not processes.main:
        return None
    log = logging.getLogger("gflow")
    for p in range(processes.count):
        seeds = [s for s in cfg.seed_list if owner[s] == p]
        log.info("seeds from process %d of %d: %s", p, processes.count, seeds)
    try:
        return run_text(cfg, data, pieces=pieces, read_only=True)
    except FileNotFoundError as e:
        raise FileNotFoundError(
            f"{e} in {pieces.directory}; put the run directory on a filesystem that "
            "every process shares"
        ) from None
