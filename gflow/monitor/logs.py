"""The monitor's files, written as training goes and read back.

A monitor directory holds

- ``config.json``: what was monitored (every, probe shape, top and tracked tokens,
  the thresholds, the shape of every signal), written atomically;
- ``metrics.csv``: one row per observation, ``step``, ``t`` and every signal
  flattened as ``name_i_j`` (the column names of a run's metrics CSV);
- ``events.jsonl``: one JSON object per event (``OnlineStageDetector``'s
  ``Stage``, as ``Stage.to_dict`` writes it).

Rows and events are appended with one ``write`` of whole lines each to a file opened
for appending, so a killed process leaves every line written before it and at most a
partial last line, which the readers skip. The files are synced to disk on close and
at most every ``sync_every`` seconds, so even a machine crash loses at most that.
"""

from __future__ import annotations

import csv
import io
import os
import time
from pathlib import Path

import numpy as np

from gflow.analysis.stage import Stage
from gflow.dynamics.trajectory import Trajectory
from gflow.runs.files import atomic_write_bytes, complete_lines, read_json, read_jsonl

CONFIG, METRICS, EVENTS = "config.json", "metrics.csv", "events.jsonl"


class AppendLog:
    """Whole lines appended to a file, one ``write`` call per batch of lines."""

    def __init__(self, path: str | os.PathLike, *, sync_every: float = 10.0):
        self.path = Path(path)
        self.sync_every = sync_every
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._synced = time.monotonic()

    def write(self, lines: list[str]) -> None:
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        data = "".join(line + "\n" for line in lines).encode()
        view = memoryview(data)
        while view:  # one call in practice; loop in case the OS takes part of it
            view = view[os.write(self._fd, view) :]
        if time.monotonic() - self._synced > self.sync_every:
            os.fsync(self._fd)
            self._synced = time.monotonic()

    def close(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None


def flat_names(shapes: dict[str, list[int]]) -> list[str]:
    """The CSV column of every scalar of the signals (in ``shapes``' order)."""
    names = []
    for name, shape in shapes.items():
        if not shape:
            names.append(name)
            continue
        names += [name + "_" + "_".join(map(str, i)) for i in np.ndindex(*shape)]
    return names


def csv_line(values: list) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(values)
    return buf.getvalue()


def read_rows(run_dir) -> tuple[list[str], np.ndarray]:
    """The header and the complete rows [n, columns] of ``metrics.csv``."""
    lines = complete_lines(Path(run_dir) / METRICS)
    if not lines:
        return [], np.zeros((0, 0))
    header = next(csv.reader([lines[0]]))
    rows = [r for r in csv.reader(lines[1:]) if len(r) == len(header)]
    return header, np.array(rows, dtype=float).reshape(len(rows), len(header))


def read_events(run_dir) -> list[Stage]:
    """The complete events of ``events.jsonl``, in order."""
    return [Stage.from_dict(e) for e in read_jsonl(Path(run_dir) / EVENTS)]


def signals_from_rows(shapes: dict, header: list[str], rows: np.ndarray) -> dict:
    """name -> array [n, *shape] from the CSV rows."""
    col = {name: i for i, name in enumerate(header)}
    out = {}
    for name, shape in shapes.items():
        cols = flat_names({name: shape})
        missing = [c for c in cols if c not in col]
        if missing:
            raise ValueError(f"metrics.csv lacks the columns {missing[:3]}")
        out[name] = rows[:, [col[c] for c in cols]].reshape(len(rows), *shape)
    return out


def load_monitor(run_dir) -> tuple[Trajectory, list[Stage], dict]:
    """A monitor directory as (trajectory of the signals, events, config).

    The trajectory's ``t`` is the monitor's clock and its metrics the signals, each
    [n, ...], plus ``step``; ``final`` is None (the monitor keeps no model).
    """
    run_dir = Path(run_dir)
    if not (run_dir / CONFIG).is_file():
        raise FileNotFoundError(f"{run_dir} has no {CONFIG}: not a monitor directory")
    cfg = read_json(run_dir / CONFIG)
    if cfg.get("command") != "monitor" or "shapes" not in cfg:
        raise ValueError(f"{run_dir}/{CONFIG} is not a monitor's configuration")
    header, rows = read_rows(run_dir)
    if not len(rows):
        raise ValueError(f"{run_dir}/{METRICS} holds no observation yet")
    metrics = signals_from_rows(cfg["shapes"], header, rows)
    metrics["step"] = rows[:, header.index("step")]
    traj = Trajectory(
        t=rows[:, header.index("t")], metrics=metrics, final=None, info=cfg
    )
    return traj, read_events(run_dir), cfg


def rewrite(path: Path, lines: list[str]) -> None:
    """Atomically replace ``path`` by these lines (resuming drops rows after the
    restart)."""
    atomic_write_bytes(path, "".join(line + "\n" for line in lines).encode())
