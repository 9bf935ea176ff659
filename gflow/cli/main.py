"""The ``gflow`` command line: the one place where strings become objects."""

from __future__ import annotations

import argparse
import re
import signal
import sys

from gflow.cli.commands import COMMANDS
from gflow.dynamics.interrupt import SignalWatch, abandoned
from gflow.runs.config import ConfigError

_TYPE_NAMES = {"int": "an integer", "float": "a number"}


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, ``gflow CMD: error: ...``.

    argparse prints the whole usage before its error line; gflow's convention (bad
    settings end in one line that names the setting and the fix, exit status 2)
    holds for argparse's own errors too. Sub-parsers are of this class as well.
    """

    def error(self, message):
        message = re.sub(
            r"invalid (\w+) value: ('.*')",
            lambda m: f"expected {_TYPE_NAMES.get(m[1], m[1])}, got {m[2]}",
            message,
        )
        message = re.sub(
            r"ignored explicit argument (.*)", r"takes no value, got \1", message
        )
        message = " ".join(message.split())  # one line, whatever argparse composed
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="gflow",
        description="Gradient-flow simulator for attention training dynamics.",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument(
        "--debug", action="store_true", help="show full tracebacks on errors"
    )
    parser.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="do not keep compiled programs on disk for later runs (also "
        "GFLOW_COMPILE_CACHE=0; GFLOW_COMPILE_CACHE=DIR chooses the folder, default "
        "~/.cache/gflow/jax-HOST)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _subparser(parser, command):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[command]
    return parser


def main(argv=None) -> int:
    """Run ``gflow`` with ``argv`` (default sys.argv[1:]); return the exit status.

    Bad settings, argparse's included, print one line ``gflow CMD: error: ...`` on
    stderr and return 2; ``--help`` prints the help and returns 0. As the process's
    entry point (``argv`` None: the ``gflow`` command, ``python -m gflow``) it also
    turns on the persistent compilation cache (``gflow.cli.compile_cache``); a call
    with an explicit ``argv`` (a script, a test) leaves JAX's settings alone.
    """
    entry_point = argv is None
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # name the command whose options these are not
            _subparser(parser, args.command).error(
                f"unrecognized arguments: {' '.join(extra)}"
            )
    except SystemExit as e:  # argparse's error() or --help: already printed
        return e.code if isinstance(e.code, int) else 2
    if entry_point:
        from gflow.cli.compile_cache import configure

        args.compile_cache = configure(no_cache=args.no_compile_cache)
    # SIGTERM (a batch scheduler's stop) unwinds like Ctrl-C: checkpoints are atomic
    signal.signal(signal.SIGTERM, _interrupt)
    watch = SignalWatch()
    args.interrupt = watch  # asked inside long compiled solves (Context.interrupt)
    try:
        with watch:
            return args.handler(args)
    except (ConfigError, FileNotFoundError) as e:  # UsageError is a ConfigError
        if args.debug:
            raise
        message = " ".join(str(e).split()) or type(e).__name__  # always one line
        print(f"gflow {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"gflow {args.command}: interrupted; finished work is saved "
            "(a flow, sweep, train or text run resumes with --resume RUN_DIR)",
            file=sys.stderr,
        )
        if entry_point and abandoned():
            _exit_now(130)
        return 130


def _exit_now(status: int) -> None:
    """End the process now, leaving abandoned compiled work (``gflow.dynamics.
    interrupt.call_interruptibly``) unfinished: an ordinary exit could wait for
    it in XLA's teardown. Logs and streams are flushed first; the run
    directory's lock ends with the process, and checkpoints are written
    atomically, so nothing half-written remains."""
    import logging
    import os

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


if __name__ == "__main__":
    sys.exit(main())
