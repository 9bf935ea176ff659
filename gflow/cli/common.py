"""What the command modules share: the one-line error, option types, the log."""

from __future__ import annotations

import argparse
import datetime
import os
from pathlib import Path

from gflow.runs.config import ConfigError
from gflow.runs.files import not_regular


class UsageError(ConfigError):
    """A bad option or setting from the user: the message names it and the fix.

    A ``ConfigError`` raised by a configuration reads the same way; the command
    line prints either in one line, exit status 2.
    """


def default_out(command: str) -> Path:
    """runs/<command>-<local time>: the default run directory of a command."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{command}-{stamp}"


def floats(text: str) -> tuple[float, ...]:
    """argparse type: comma-separated numbers."""
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}"
        ) from None


def _writable_place(text: str, kind: str) -> Path:
    """``Path(text)`` if a ``kind`` ("directory" or "file") can be made there, else
    ArgumentTypeError saying why and what would do: a path the system refuses to
    look at (a name too long, a loop of links) included."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a {kind} path, got {text!r}")
    try:
        return _checked_place(Path(text), kind)
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise argparse.ArgumentTypeError(
            f"cannot use {text} ({why}); give another {kind} path"
        ) from None


def _checked_place(path: Path, kind: str) -> Path:
    if os.path.lexists(path):  # a dangling link is in the way as well
        if kind == "directory" and not path.is_dir():
            raise argparse.ArgumentTypeError(
                f"{path} exists and is not a directory; give a new or existing "
                "directory"
            )
        # the write renames a file over the path: refuse what it would replace
        what = not_regular(path) if kind == "file" else None
        if what is not None:
            raise argparse.ArgumentTypeError(
                f"{path} is {what}, which would be replaced; give the path of a "
                "regular file (new or to overwrite)"
            )
    parent = path.parent if not path.is_dir() else path
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(
            f"{parent} is not a directory, so {path} cannot be created; give a path "
            "under a directory"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(
            f"cannot write under {parent}; give a path in a writable directory"
        )
    return path


def out_dir(text: str) -> Path:
    """argparse type of every command's run directory (``--out``): a new or existing
    directory, refused at parse time (before anything runs or is written) when a file
    is in the way."""
    return _writable_place(text, "directory")


def add_out_option(parser, command: str) -> None:
    """The ``--out`` run directory option of every command that writes one."""
    parser.add_argument(
        "--out",
        type=out_dir,
        default=None,
        metavar="DIR",
        help=f"run directory, new or existing (default: runs/{command}-<time>)",
    )


def run_dir_arg(text: str) -> Path:
    """argparse type of a run directory to read (``--resume``, ``report RUN_DIR``):
    not empty (``Path("")`` is the working directory). The commands check that it
    holds a config.json."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"expected the directory of an earlier gflow run, got {text!r}"
        )
    return Path(text)


def out_file(text: str) -> Path:
    """argparse type of an output file (``report --out``): a new path or a regular
    file (not a symbolic link, FIFO, socket, device or directory, which the write
    would replace), under a directory that exists or can be made and is writable."""
    return _writable_place(text, "file")


def start_log(run_dir) -> None:
    """Send the library's log records to ``run_dir/gflow.log`` (appending)."""
    import logging

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(run_dir / "gflow.log")
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    logger = logging.getLogger("gflow")
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
