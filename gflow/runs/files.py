"""Crash-safe files of a run directory: atomic writes, JSON and metric tables."""

from __future__ import annotations

import csv
import io as _io
import json
import os
import tempfile
from pathlib import Path

import jax
import numpy as np


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path`` then rename it into place.

    A run killed part-way leaves either the old file or none, never a half-written one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; run files are for sharing
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def to_json(obj, indent: int | None = 2) -> str:
    """``obj`` as JSON text, NumPy and JAX scalars and arrays written as lists."""

    def default(x):
        if isinstance(x, (np.generic, np.ndarray)):
            return x.tolist()
        if isinstance(x, jax.Array):
            return np.asarray(x).tolist()
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
