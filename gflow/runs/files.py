"""Crash-safe files of a run directory: atomic writes, JSON and metric tables.

Every file a run writes goes through ``atomic_write_bytes``: a temporary file in the
target's folder renamed into place, never over a link, FIFO, device or directory.
"""

from __future__ import annotations

import csv
import dataclasses
import errno
import io as _io
import json
import os
import stat
import tempfile
from pathlib import Path

import jax
import numpy as np

from gflow.runs.config import ConfigError
from gflow.runs.environment import Environment


class OutputError(ConfigError, OSError):
    """A file that cannot be written where asked, in one line naming the path.

    A ``ConfigError`` (the command line prints it as one line, exit status 2) and an
    ``OSError`` (callers that treat an unwritable place as best effort, such as the
    program cache, still catch it).
    """


#: What a path holds that a write must not replace, by ``os.lstat`` mode test.
_NOT_REGULAR = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
)


def not_regular(path: str | os.PathLike) -> str | None:
    """What ``path`` is when it exists and is not a regular file ("a symbolic link",
    "a FIFO (named pipe)", "a socket", "a character device", "a block device", "a
    directory"); None when it is a regular file or absent. Links are not followed."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:  # absent, or not reachable: the write itself says why
        return None
    return next((kind for test, kind in _NOT_REGULAR if test(mode)), None)


def _unwritable(path: Path, e: OSError) -> OutputError:
    why = e.strerror or type(e).__name__
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "give a path in a writable directory"
    elif e.errno == errno.ENOSPC:
        fix = "free some space or give a path on another disk"
    else:
        fix = "give another path"
    return OutputError(f"cannot write {path}: {why}; {fix}")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path`` then rename it into place.

    A run killed part-way leaves either the old file or none, never a half-written one.
    A ``path`` that exists and is not a regular file (a symbolic link, FIFO, socket,
    device or directory) is refused, not replaced, and a write the system refuses
    (permissions, a read-only or full disk) is one line: both raise ``OutputError``
    (a ``ConfigError``) naming the path.
    """
    path = Path(path)
    kind = not_regular(path)
    if kind is not None:
        raise OutputError(
            f"{path} is {kind}; refusing to replace it: give the path of a regular "
            "file (new or to overwrite)"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
        )
    except OSError as e:
        raise _unwritable(path, e) from None
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; run files are for sharing
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise _unwritable(path, e) from None
        raise


def to_json(obj, indent: int | None = 2) -> str:
    """``obj`` as JSON text, NumPy and JAX scalars and arrays written as lists, an
    ``Environment`` as the object of its fields."""

    def default(x):
        if isinstance(x, (np.generic, np.ndarray)):
            return x.tolist()
        if isinstance(x, jax.Array):
            return np.asarray(x).tolist()
        if isinstance(x, Environment):
            return dataclasses.asdict(x)
        raise TypeError(f"cannot write {type(x).__name__} to JSON")

    return json.dumps(obj, indent=indent, default=default)


def write_json(path, obj) -> None:
    """Atomically write ``obj`` as indented JSON (NumPy scalars and arrays allowed)."""
    atomic_write_bytes(path, (to_json(obj) + "\n").encode())


def read_json(path):
    """The JSON document at ``path``."""
    with open(path) as f:
        return json.load(f)


def complete_lines(path) -> list[str]:
    """The lines of a text file that end in a newline: a writer killed mid-line
    leaves a partial last line, which is dropped. [] when the file is absent."""
    path = Path(path)
    if not path.exists():
        return []
    return path.read_text().split("\n")[:-1]


def read_jsonl(path) -> list[dict]:
    """The complete JSON lines of ``path`` (``complete_lines``), in order; lines that
    are not JSON are skipped."""
    out = []
    for line in complete_lines(path):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def flat_columns(t, metrics) -> dict[str, np.ndarray]:
    cols = {"t": np.asarray(t)}
    names = sorted(metrics, key=lambda k: (k != "loss", k != "grad_norm", k))
    for name in names:
        value = np.asarray(metrics[name])
        if value.ndim == 1:
            cols[name] = value
            continue
        flat = value.reshape(value.shape[0], -1)
        for j, idx in enumerate(np.ndindex(*value.shape[1:])):
            cols[name + "_" + "_".join(map(str, idx))] = flat[:, j]
    return cols


def metrics_csv(t, metrics) -> bytes:
    """One row per saved time, one column per scalar (arrays flattened as name_i_j)."""
    cols = flat_columns(t, metrics)
    buf = _io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(cols)
    for row in zip(*cols.values()):
        writer.writerow([repr(float(x)) for x in row])
    return buf.getvalue().encode()
