"""The one driver every command goes through: ``execute``.

It does not know which command it runs. In order: resolve the configuration
(``gflow.cli.options.resolve``); check the process options; refuse a run
directory that holds another run, before anything is written; choose JAX's
precision (this is the entry point); lock the directory; ``plan``; write
``config.json``; ``run``; ``write``; draw the figures; print the summary.
With ``--processes N`` the parent writes config.json and starts N workers that
continue the run from it (``--resume``), so every worker runs exactly the
configuration on disk.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from gflow.cli.common import UsageError, start_log
from gflow.cli.options import Request, resolve
from gflow.cli.processes import Plan, check_run_dir, plan
from gflow.runs.job import AbstractJob, Context
from gflow.runs.run_dir import RunDirectory

#: figures(run_dir, result): what a command draws after its files are written.
Figures = Callable[[Any, Any], None]


def _program_cache(args):
    """The traced-program cache beside the compilation cache, when that one is on."""
    folder = getattr(args, "compile_cache", None)
    if folder is None:
        return None
    from gflow.runs.program_cache import ProgramCache

    # its calls wait interruptibly: a kept program cannot ask the watch inside
    return ProgramCache(folder / "programs", interrupt=getattr(args, "interrupt", None))


def _launch(job: AbstractJob, request: Request, how: Plan, args) -> int:
    """``--processes N``: config.json first (no JAX in this process), then N
    workers that continue the run from it."""
    from gflow.cli.processes import launch

    directory = RunDirectory(request.out)
    if not request.resumed and not directory.accept(job.command, request.cfg):
        directory.write_config(job.command, request.cfg, environment=None)
    flags = ["--quiet"] * args.quiet + ["--debug"] * args.debug
    own = ["--resume", str(request.out)] + ["--no-figures"] * args.no_figures
    return launch(
        job.command,
        own,
        how.count,
        request.out,
        global_args=flags,
        timeout=how.timeout,
        saved=job.saved,
    )


def execute(job: AbstractJob, args, figures: Figures | None = None) -> int:
    """Run ``job`` as the options ``args`` say; return the exit status."""
    how = plan(args) if job.splits else Plan()
    request = resolve(job, args)
    cfg = request.cfg
    if how.local or how.join:
        flag = "--processes" if how.local else "--num-processes"
        if not request.resumed:
            cfg = job.for_processes(cfg, how.count, request.chosen)
        job.check_processes(cfg, how.count, f"{flag} {how.count}", request.resumed)
        request = Request(cfg, request.out, request.resumed, request.chosen)
    if how.join and not request.resumed and args.out is None:
        raise UsageError(
            "--coordinator: give --out DIR (on a filesystem that every process "
            f"shares): the default runs/{job.command}-<time> differs between "
            "processes"
        )
    if how.local:
        return _launch(job, request, how, args)
    import jax

    jax.config.update("jax_enable_x64", job.x64(cfg))  # the entry point chooses
    processes = None
    if how.join:
        from gflow.cli.processes import join

        processes = join(how, job.command)
        if how.coordinator == "auto":  # the count came from the scheduler
            what = f"--coordinator auto ({processes.count} processes)"
            if not request.resumed:
                cfg = job.for_processes(cfg, processes.count, request.chosen)
            job.check_processes(cfg, processes.count, what, request.resumed)
    context = Context(
        quiet=args.quiet,
        resumed=request.resumed,
        processes=processes,
        program_cache=_program_cache(args),
        interrupt=getattr(args, "interrupt", None),
    )
    directory = RunDirectory(request.out)
    start = time.perf_counter()
    if context.main and not request.resumed:
        directory.accept(job.command, cfg)  # before anything is written
    option = "--resume" if request.resumed else "--out"
    lock = (
        directory.lock(job.command, option)
        if context.main
        else contextlib.nullcontext()
    )
    with lock:
        if context.main:
            planned = job.plan(cfg)
            start_log(directory.path)
            # new, or begun by a launcher
            if not (directory.has_config() and directory.read().started):
                from gflow.runs.environment import environment

                directory.write_config(
                    job.command, cfg, environment(), job.facts(planned)
                )
            job.start(planned, directory, context)
        if processes is not None:

            def same():
                saved = directory.read_config(job.config_type, job.command, "--out")
                return saved.differences(cfg) == []

            check_run_dir(directory.path, same, processes, job.command)
            if not context.main:  # from what process 0 wrote (a trained tokeniser)
                planned = job.plan(job.resume(cfg, directory))
        result = job.run(planned, directory, context)
        if not context.main:
            return 0
        result = job.write(result, directory)
        if figures is not None and not args.no_figures:
            figures(directory.path, result)
    lines = job.summary(result).rstrip("\n").split("\n")
    lines[-1] += f", {time.perf_counter() - start:.1f} s -> {directory.path}"
    print("\n".join(lines))
    return 0 if job.succeeded(result) else 1
