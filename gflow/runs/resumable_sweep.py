"""Sweeps that survive interruption: members run in chunks, each chunk saved at once.

``run_sweep`` runs every member in one vmapped program, so a killed sweep would lose
all of them. ``run_sweep_resumable`` cuts the step sizes into chunks of ``chunk``
members, runs each chunk with ``run_sweep`` (padded to ``chunk`` members, so every
chunk is the same compiled program); each chunk is one piece of the checkpoint driver
(``gflow.runs.checkpoint``), written atomically to ``checkpoint_dir/members-<i>.npz``
before the next one starts. Called again with the same directory and fingerprint,
finished chunks are read back instead of recomputed (a chunk of another configuration
is refused); the same chunk size gives bit-identical members.
"""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

from gflow.dynamics.sweep import SweepRun, run_sweep
from gflow.runs.checkpoint import PieceStore, run_pieces
from gflow.runs.trajectory_files import param_columns, params_from_columns

log = logging.getLogger(__name__)

_PREFIX = "members"
_FIELDS = ("lrs", "t", "steps", "loss", "diverged_step")
_OPTIONAL = ("first_rise_step", "rises")  # None in runs that did not record them


def chunk_path(checkpoint_dir, i: int) -> Path:
    """Where chunk ``i`` of a sweep is saved."""
    return PieceStore(checkpoint_dir, _PREFIX, None).path(i)


def _columns(run: SweepRun) -> dict[str, np.ndarray]:
    columns = {f: np.asarray(getattr(run, f)) for f in _FIELDS}
    columns.update(
        {
            f: np.asarray(getattr(run, f))
            for f in _OPTIONAL
            if getattr(run, f) is not None
        }
    )
    columns.update(param_columns(run.params))
    return columns


def _from_columns(columns: dict, model) -> SweepRun:
    columns = dict(columns)
    return SweepRun(
        **{f: columns[f] for f in _FIELDS},
        **{f: columns.get(f) for f in _OPTIONAL},
        params=params_from_columns(columns, model),
    )


def load_members(checkpoint_dir, model) -> SweepRun:
    """All chunks saved in ``checkpoint_dir``, in order, as one SweepRun.

    ``model`` is the sweep's initial model (the template of the snapshots).
    """
    store = PieceStore(checkpoint_dir, _PREFIX, None)
    paths = store.paths()
    if not paths:
        raise FileNotFoundError(f"no saved sweep members in {checkpoint_dir}")
    runs = [_from_columns(store.load(i), model) for i in range(len(paths))]
    return concatenate(runs, {"chunks": len(runs)})


def concatenate(runs: list[SweepRun], info: dict) -> SweepRun:
    """One SweepRun of the members of ``runs``, in order."""

    def cat(*xs):
        return np.concatenate(xs) if eqx.is_array(xs[0]) else xs[0]

    optional = {}
    for f in _OPTIONAL:
        parts = [getattr(r, f) for r in runs]
        optional[f] = None if any(p is None for p in parts) else np.concatenate(parts)
    return SweepRun(
        **{f: np.concatenate([getattr(r, f) for r in runs]) for f in _FIELDS},
        **optional,
        params=jax.tree.map(cat, *[r.params for r in runs]),
        info=info,
    )


def _slice(run: SweepRun, n: int) -> SweepRun:
    """The first ``n`` members of ``run`` (drops the padding)."""
    return SweepRun(
        **{f: getattr(run, f)[:n] for f in _FIELDS},
        **{
            f: None if getattr(run, f) is None else getattr(run, f)[:n]
            for f in _OPTIONAL
        },
        params=jax.tree.map(lambda x: x[:n] if eqx.is_array(x) else x, run.params),
        info=run.info,
    )


def run_sweep_resumable(
    loss_fn,
    model,
    optimizer,
    lrs,
    *,
    t1: float,
    checkpoint_dir,
    fingerprint: str,
    chunk: int = 4,
    mesh=None,
    progress: bool | None = None,
    **kwargs,
) -> SweepRun:
    """``run_sweep`` in chunks of ``chunk`` members, each checkpointed when done.

    Args:
        loss_fn, model, optimizer, lrs, t1, mesh, **kwargs: as in ``run_sweep``.
        checkpoint_dir: where finished chunks are kept; chunks found there are
            loaded, not recomputed (ValueError if their ``fingerprint`` or step sizes
            differ).
        fingerprint: a string that identifies everything else that determines the
            members (the caller's resolved configuration).
        chunk: members per compiled program; rounded up to a multiple of the mesh
            size. Smaller chunks lose less to an interruption; larger ones vectorise
            more.
        progress: a progress bar over chunks; None shows one when stderr is a
            terminal.

    Returns:
        The SweepRun of all members; ``info["resumed_chunks"]`` counts the chunks
        read back from ``checkpoint_dir``.
    """
    lrs = np.asarray(lrs, float).ravel()
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    if mesh is not None:
        chunk = mesh.size * math.ceil(chunk / mesh.size)
    parts = [lrs[start : start + chunk] for start in range(0, lrs.size, chunk)]

    def compute(i, previous):
        part = parts[i]
        padded = np.concatenate([part, np.repeat(part[-1:], chunk - part.size)])
        run = run_sweep(loss_fn, model, optimizer, padded, t1=t1, mesh=mesh, **kwargs)
        return _columns(_slice(run, part.size))

    bar = None
    if progress or (progress is None and sys.stderr.isatty()):
        from tqdm.auto import tqdm

        bar = tqdm(total=lrs.size, desc="sweep members", unit="member")
    resumed = []

    def finished(i, columns, was_resumed):
        resumed.append(was_resumed)
        verb = "read back" if was_resumed else "done"
        log.info("chunk %d: η = %s %s", i, ", ".join(f"{x:g}" for x in parts[i]), verb)
        if bar is not None:
            bar.update(parts[i].size)

    try:
        pieces = run_pieces(
            PieceStore(checkpoint_dir, _PREFIX, fingerprint),
            len(parts),
            compute,
            expect=lambda i: {"lrs": parts[i]},
            finished=finished,
        )
    finally:
        if bar is not None:
            bar.close()
    runs = [_from_columns(columns, model) for columns in pieces]
    resumed = sum(resumed)
    info = {
        "t1": float(t1),
        "sharded_over": 1 if mesh is None else mesh.size,
        "chunk": chunk,
        "resumed_chunks": resumed,
    }
    return concatenate(runs, info)
