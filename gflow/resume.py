"""Flows that survive interruption: integrate in segments, checkpoint after each.

The horizon [t0, t1] is cut into equal segments; after each one the model, the metrics
so far and the solver statistics are written atomically into a checkpoint directory.
Called again with the same directory and configuration, the solve continues after the
last finished segment. Every segment is solved by the same compiled program, so a run
that was killed and resumed gives bit-identical results to one that never stopped.
"""

from __future__ import annotations

import hashlib
import io as _io
import json
import logging
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

from .flow import DEFAULT_NUM_SAVES, solve_flow
from .io import (
    atomic_write_bytes,
    param_columns,
    params_from_columns,
    read_json,
    write_json,
)
from .trajectory import Trajectory

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoint.json"
_SUMMED = ("num_steps", "num_accepted_steps", "num_rejected_steps", "grad_evals")


def _fingerprint(model, ts, t0, t1, segments, kwargs) -> str:
    """A hash of everything that determines the result, to refuse a wrong resume."""
    h = hashlib.sha256()
    leaves = jax.tree.leaves(eqx.filter(model, eqx.is_array))
    for x in np.asarray(ts), *(np.asarray(v) for v in leaves):
        h.update(np.ascontiguousarray(x).tobytes())
    desc = {k: repr(v) for k, v in sorted(kwargs.items()) if k != "progress"}
    h.update(json.dumps([t0, t1, segments, desc], sort_keys=True).encode())
    return h.hexdigest()[:16]


def _segment_times(ts, bounds, k):
    """The save times in segment k: (lo, hi], and [lo, hi] for the first one."""
    lo, hi = bounds[k], bounds[k + 1]
    inside = ts[(ts > lo) & (ts <= hi)] if k else ts[(ts >= lo) & (ts <= hi)]
    return inside


def _serialise(model) -> bytes:
    buf = _io.BytesIO()
    eqx.tree_serialise_leaves(buf, model)
    return buf.getvalue()


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
        checkpoint_dir: where checkpoints live; if it holds a checkpoint of the same
            configuration, the solve resumes after its last finished segment.
        segments: number of equal pieces of [t0, t1] (each is one checkpoint).
        **kwargs: passed to ``solve_flow`` (solver, rtol, atol, observables, ...);
            with ``save_params=True`` the parameter snapshots are checkpointed with
            the metrics and come back as ``Trajectory.params``.

    Returns:
        The whole Trajectory; ``info["resumed_from_segment"]`` says where it resumed
        (−1 for a fresh start). A segment that does not succeed ends the run with its
        status and the trajectory so far.
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
    fp = _fingerprint(model, ts, t0, t1, segments, kwargs)

    done, current, pieces, stats = -1, model, [], dict.fromkeys(_SUMMED, 0)
    meta_path = ckdir / CHECKPOINT
    if meta_path.exists():
        meta = read_json(meta_path)
        if meta["fingerprint"] != fp:
            raise ValueError(
                f"{meta_path} was written by a different configuration; resume with "
                "the same settings, or use a new output directory"
            )
        done = meta["segment"]
        current = eqx.tree_deserialise_leaves(ckdir / meta["model"], model)
        with np.load(ckdir / meta["metrics"]) as data:
            pieces = [{k: data[k] for k in data.files}]
        stats = meta["stats"]
        log.info(
            "resuming after segment %d of %d (t = %g)",
            done + 1,
            segments,
            bounds[done + 1],
        )
    resumed_from = done
    status = "success"
    for k in range(done + 1, segments):
        want = chunks[k]
        padded = np.concatenate([want, np.full(width - len(want), bounds[k + 1])])
        tr = solve_flow(
            loss_fn, current, t0=bounds[k], t1=bounds[k + 1], ts=padded, **kwargs
        )
        n = min(len(want), len(tr))
        columns = {"t": tr.t, **tr.metrics}
        if tr.params is not None:
            columns.update(param_columns(tr.params))
        pieces.append({m: v[:n] for m, v in columns.items()})
        for key in _SUMMED:
            stats[key] = (stats[key] or 0) + (tr.stats.get(key) or 0)
        current = tr.final
        status = tr.status
        if status != "success":
            log.warning(
                "segment %d ended with status %s at t = %g",
                k,
                status,
                tr.stats.get("t_reached", float("nan")),
            )
            break
        merged = {m: np.concatenate([p[m] for p in pieces]) for m in pieces[0]}
        pieces = [merged]
        buf = _io.BytesIO()
        np.savez(buf, **merged)
        atomic_write_bytes(ckdir / f"segment{k}.npz", buf.getvalue())
        atomic_write_bytes(ckdir / f"segment{k}.eqx", _serialise(current))
        write_json(
            meta_path,
            {
                "fingerprint": fp,
                "segment": k,
                "segments": segments,
                "t": float(bounds[k + 1]),
                "model": f"segment{k}.eqx",
                "metrics": f"segment{k}.npz",
                "stats": stats,
            },
        )
        for old in (f"segment{k - 1}.npz", f"segment{k - 1}.eqx"):
            (ckdir / old).unlink(missing_ok=True)
        log.info(
            "segment %d/%d done: t = %g, loss = %.6g",
            k + 1,
            segments,
            bounds[k + 1],
            merged["loss"][-1],
        )
    merged = {m: np.concatenate([p[m] for p in pieces]) for m in pieces[0]}
    t = merged.pop("t")
    params = None
    if kwargs.get("save_params"):
        params = params_from_columns(merged, model)
    return Trajectory(
        t=t,
        metrics=merged,
        final=current,
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
    )
