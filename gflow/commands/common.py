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
