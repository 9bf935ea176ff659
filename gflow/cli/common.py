"""Helpers shared by the command modules."""

from __future__ import annotations

import argparse
import datetime
import os
from pathlib import Path


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
    ArgumentTypeError saying why and what would do."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a {kind} path, got {text!r}")
    import stat

    path = Path(text)
    if os.path.lexists(path):  # a dangling link is in the way as well
        if kind == "directory" and not path.is_dir():
            raise argparse.ArgumentTypeError(
                f"{path} exists and is not a directory; give a new or existing "
                "directory"
            )
        mode = os.lstat(path).st_mode
        if kind == "file" and not stat.S_ISREG(mode):
            # the write renames a file over the path: refuse what it would replace
            kinds = (
                (stat.S_ISLNK, "a symbolic link"),
                (stat.S_ISDIR, "a directory"),
                (stat.S_ISFIFO, "a FIFO (named pipe)"),
                (stat.S_ISSOCK, "a socket"),
                (stat.S_ISCHR, "a character device"),
                (stat.S_ISBLK, "a block device"),
            )
            what = next((k for is_kind, k in kinds if is_kind(mode)), "special")
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


_KINDS = {float: "a number", int: "an integer", bool: "true or false", str: "a string"}
_LISTS = {
    float: "a list of numbers",
    int: "a list of integers",
    str: "a list of strings",
}


def _check_value(value, hint) -> str | None:
    """None if ``value`` (from JSON) fits the annotation ``hint``, else what would."""
    import dataclasses
    import types
    import typing

    origin, targs = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in targs:
            return None
        whats = [_check_value(value, t) for t in targs if t is not type(None)]
        return None if None in whats else " or ".join(whats)
    if origin is tuple:
        what = _LISTS.get(targs[0], "a list")
        if not isinstance(value, (list, tuple)):
            return what
        return None if all(_check_value(v, targs[0]) is None for v in value) else what
    if dataclasses.is_dataclass(hint):
        return None if isinstance(value, dict) else "a JSON object of settings"
    if hint is bool:
        return None if isinstance(value, bool) else _KINDS[bool]
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else _KINDS[int]
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if ok else _KINDS[float]
    if hint is str:
        return None if isinstance(value, str) else _KINDS[str]
    return None  # a field type this check does not know: the config validates it


def check_settings(data: dict, cls, source: str, prefix: str = "") -> None:
    """UsageError naming the first unknown setting or setting of the wrong JSON type.

    ``data`` holds settings of the frozen dataclass ``cls`` (nested dataclass fields
    as JSON objects, checked recursively); ``source`` names where they came from.
    """
    import dataclasses
    import json
    import typing

    from gflow.cli.errors import UsageError

    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise UsageError(
            f"{source} has unknown settings {', '.join(prefix + k for k in unknown)}; "
            f"known: {', '.join(sorted(names))}"
        )
    for name, value in data.items():
        what = _check_value(value, hints[name])
        if what is not None:
            raise UsageError(
                f"{source}: setting {prefix}{name} must be {what}, got "
                f"{json.dumps(value)[:60]}"
            )
        if dataclasses.is_dataclass(hints[name]):
            check_settings(value, hints[name], source, prefix=f"{prefix}{name}.")


def load_config_file(path, cls, option: str = "--config") -> dict:
    """Read a JSON file of ``cls`` (a frozen dataclass) fields, with one-line errors.

    Returns the field values as a dict; unreadable files, malformed JSON, unknown keys
    and values of the wrong JSON type raise UsageError naming ``option``, the file and
    the fix. (Values of the right type are the dataclass's to validate.)
    """
    import json

    from gflow.cli.errors import UsageError

    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        why = getattr(e, "strerror", None) or "not a UTF-8 text file"
        raise UsageError(
            f"{option}: cannot read config file {path}: {why}; give a JSON file"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(
            f"{option}: config file {path} is not valid JSON (line {e.lineno}, column "
            f"{e.colno}: {e.msg}); fix the file or pass the settings as options"
        ) from None
    if isinstance(data, dict) and isinstance(data.get("config"), dict):
        data = data["config"]  # a run directory's config.json works as well
    if not isinstance(data, dict):
        raise UsageError(
            f"{option}: config file {path} must hold a JSON object of settings, "
            f"got {json.dumps(data)[:40]}"
        )
    check_settings(data, cls, f"{option}: config file {path}")
    return data


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
