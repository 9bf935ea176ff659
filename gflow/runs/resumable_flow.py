"""Flows that survive interruption: integrate in segments, checkpoint after each.

The horizon [t0, t1] is cut into equal segments, each one piece of the checkpoint
driver (``gflow.runs.checkpoint``): after each segment its saved times, metrics,
parameter snapshots, final model, status and solver statistics are written
atomically as ``segment-<k>.npz``. Called again with the same directory and
configuration, the solve continues after the last finished segment. Every segment is
solved by the same compiled program, so a run that was killed and resumed gives
bit-identical results to one that never stopped. A segment that fails (NaN, step
budget) is checkpointed with its partial trajectory and ends the run.

Segments are verified when read back (``gflow.runs.checkpoint``): a damaged one, one
copied over another, or one whose times leave its own part of [t0, t1] or do not
follow the segment before it is refused in one line that names its file (delete that
file to recompute the segment); segments written before pieces recorded their index
and checksum resume unverified, their times still checked.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from gflow.dynamics.flow import DEFAULT_NUM_SAVES, solve_flow
from gflow.dynamics.trajectory import Trajectory
from gflow.runs.checkpoint import STATUS, PieceStore, fingerprint, run_pieces
from gflow.runs.config import ConfigError
from gflow.runs.trajectory_files import param_columns, params_from_columns

log = logging.getLogger(__name__)

_SUMMED = ("num_steps", "num_accepted_steps", "num_rejected_steps", "grad_evals")
_STAT, _FINAL = "stat:", "final:"


def _segment_times(ts, bounds, k):
    """The save times in segment k: (lo, hi], and [lo, hi] for the first one."""
    lo, hi = bounds[k], bounds[k + 1]
    inside = ts[(ts > lo) & (ts <= hi)] if k else ts[(ts >= lo) & (ts <= hi)]
    return inside


def solve_flow_resumable(
    loss_fn,
    model,
    *,
    t1: float,
    checkpoint_dir,
    ts=None,
    t0: float = 0.0,
    segments: int = 10,
    **kwargs,
) -> Trajectory:
    """``solve_flow`` in ``segments`` pieces with a checkpoint after each.

    Args:
        loss_fn, model, t1, ts, t0: as in ``solve_flow``.
        checkpoint_dir: where checkpoints live; if it holds segments of the same
            configuration (the same loss and its arrays, model, times, solver and
            settings), the solve resumes after the last of them.
        segments: number of equal pieces of [t0, t1] (each is one checkpoint).
        **kwargs: passed to ``solve_flow`` (solver, rtol, atol, observables, ...);
            with ``save_params=True`` the parameter snapshots are checkpointed with
            the metrics and come back as ``Trajectory.params``.

    Returns:
        The whole Trajectory; ``info["resumed_from_segment"]`` is the last segment
        of the leading run read back (−1 for a fresh start). A segment that does
        not succeed ends the run with its status and the trajectory so far.
    """
    if segments < 1:
        raise ValueError(f"segments must be >= 1, got {segments}")
    t0, t1 = float(t0), float(t1)
    if not t1 > t0:
        raise ValueError(f"t1 must be greater than t0 = {t0}, got t1 = {t1}")
    ts = np.linspace(t0, t1, DEFAULT_NUM_SAVES) if ts is None else np.asarray(ts, float)
    bounds = np.linspace(t0, t1, segments + 1)
    chunks = [_segment_times(ts, bounds, k) for k in range(segments)]
    width = max(len(c) for c in chunks)
    ckdir = Path(checkpoint_dir)
    if (ckdir / "checkpoint.json").exists():
        raise ConfigError(
            f"{ckdir} holds a checkpoint of gflow < 0.2, which cannot be resumed; "
            "start the run again in a new output directory"
        )
    settings = {
        k: v
        for k, v in kwargs.items()
        if k not in ("progress", "observables", "program_cache", "interrupt")
    }
    fp = fingerprint(
        loss_fn,
        model,
        kwargs.get("observables"),
        settings={
            "ts": ts.tolist(),
            "t0": t0,
            "t1": t1,
            "segments": segments,
            **{k: repr(v) for k, v in sorted(settings.items())},
        },
    )

    reports = {}  # segment -> the stall report of a segment that stopped early

    def compute(k, previous):
        start = (
            model
            if previous is None
            else params_from_columns(dict(previous), model, _FINAL)
        )
        want = chunks[k]
        padded = np.concatenate([want, np.full(width - len(want), bounds[k + 1])])
        tr = solve_flow(
            loss_fn, start, t0=bounds[k], t1=bounds[k + 1], ts=padded, **kwargs
        )
        if tr.diagnosis is not None:
            reports[k] = tr.diagnosis
        n = min(len(want), len(tr))
        columns = {"t": tr.t, **tr.metrics}
        if tr.params is not None:
            columns.update(param_columns(tr.params))
        columns = {m: np.asarray(v)[:n] for m, v in columns.items()}
        columns.update(param_columns(tr.final, _FINAL))
        columns.update({_STAT + s: np.asarray(tr.stats.get(s) or 0) for s in _SUMMED})
        columns[STATUS] = np.asarray(tr.status)
        return columns

    def finished(k, columns, resumed):
        verb = "read back" if resumed else "done"
        loss = columns["loss"][-1] if len(columns["loss"]) else float("nan")
        log.info(
            "segment %d/%d %s: t = %g, loss = %.6g",
            k + 1,
            segments,
            verb,
            bounds[k + 1],
            loss,
        )

    store = PieceStore(ckdir, "segment", fp)
    # the leading run of saved segments: a later one past a missing segment is read
    # back too, but the run resumes where the first gap is
    resumed_from = -1
    while resumed_from + 1 < segments and store.path(resumed_from + 1).exists():
        resumed_from += 1
    if resumed_from >= 0:
        log.info(
            "resuming after segment %d of %d (t = %g)",
            resumed_from + 1,
            segments,
            bounds[resumed_from + 1],
        )

    def window(k):  # a segment read back holds times of its own part of [t0, t1]
        return bounds[k], bounds[k + 1]

    pieces = run_pieces(store, segments, compute, finished=finished, window=window)
    last = dict(pieces[-1])
    final = params_from_columns(last, model, _FINAL)
    stats = {s: int(sum(int(p[_STAT + s]) for p in pieces)) for s in _SUMMED}
    status = str(last[STATUS])
    names = [m for m in pieces[0] if m != STATUS and not m.startswith((_STAT, _FINAL))]
    merged = {m: np.concatenate([p[m] for p in pieces]) for m in names}
    t = merged.pop("t")
    params = None
    if kwargs.get("save_params"):
        params = params_from_columns(merged, model)
    return Trajectory(
        t=t,
        metrics=merged,
        final=final,
        params=params,
        status=status,
        stats={**stats, "segments": segments, "t_reached": float(t[-1])},
        info={
            "kind": "flow",
            "t0": t0,
            "t1": t1,
            "segments": segments,
            "resumed_from_segment": resumed_from,
        },
        diagnosis=reports[max(reports)] if reports else None,
    )
