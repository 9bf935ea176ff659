"""Helpers shared by the command modules."""

from __future__ import annotations

import argparse
import datetime
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


def load_config_file(path, cls) -> dict:
    """Read a JSON file of ``cls`` (a frozen dataclass) fields, with one-line errors.

    Returns the field values as a dict; unknown keys, unreadable files and malformed
    JSON raise UsageError naming the file and the fix.
    """
    import dataclasses
    import json

    from ..errors import UsageError

    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise UsageError(f"cannot read config file {path}: {e.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(
            f"config file {path} is not valid JSON (line {e.lineno}, column {e.colno}: "
            f"{e.msg}); fix the file or pass the settings as options"
        ) from None
    if isinstance(data, dict) and isinstance(data.get("config"), dict):
        data = data["config"]  # a run directory's config.json works as well
    if not isinstance(data, dict):
        raise UsageError(f"config file {path} must hold a JSON object of settings")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise UsageError(
            f"config file {path} has unknown settings {', '.join(unknown)}; "
            f"known: {', '.join(sorted(names))}"
        )
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
