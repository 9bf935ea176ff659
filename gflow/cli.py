"""The ``gflow`` command line: the one place where strings become objects."""

from __future__ import annotations

import argparse
import signal
import sys

from .commands import COMMANDS
from .errors import UsageError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gflow",
        description="Gradient-flow simulator for attention training dynamics.",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument(
        "--debug", action="store_true", help="show full tracebacks on errors"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # SIGTERM (a batch scheduler's stop) unwinds like Ctrl-C: checkpoints are atomic
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return args.handler(args)
    except (UsageError, ValueError, FileNotFoundError) as e:
        if args.debug:
            raise
        print(f"gflow {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"gflow {args.command}: interrupted; finished work is saved "
            "(a flow or sweep resumes with --resume RUN_DIR)",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
