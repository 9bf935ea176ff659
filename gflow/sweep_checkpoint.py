"""Sweeps that survive interruption: members run in chunks, each chunk saved at once.

``run_sweep`` runs every member in one vmapped program, so a killed sweep would lose
all of them. ``run_sweep_resumable`` cuts the step sizes into chunks of ``chunk``
members, runs each chunk with ``run_sweep`` (padded to ``chunk`` members, so every
chunk is the same compiled program) and writes its result atomically to
``checkpoint_dir/members-<i>.npz`` before the next one starts. Called again with the
same directory and fingerprint, finished chunks are read back instead of recomputed
(a chunk of another configuration is refused); the same chunk size gives
bit-identical members.
"""

from __future__ import annotations

import io as _io
import logging
import math
import sys
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

from .io import atomic_write_bytes, param_columns, params_from_columns
from .sweep import SweepRun, run_sweep

log = logging.getLogger(__name__)

_FIELDS = ("lrs", "t", "steps", "loss", "diverged_step")
_OPTIONAL = ("first_rise_step", "rises")  # None in runs that did not record them


def chunk_path(checkpoint_dir, i: int) -> Path:
    return Path(checkpoint_dir) / f"members-{i:03d}.npz"


def _write_chunk(path: Path, run: SweepRun, fingerprint: str) -> None:
    columns = {f: np.asarray(getattr(run, f)) for f in _FIELDS}
    columns.update(
        {
            f: np.asarray(getattr(run, f))
            for f in _OPTIONAL
            if getattr(run, f) is not None
        }
    )
    columns.update(param_columns(run.params))
    buf = _io.BytesIO()
    np.savez(buf, fingerprint=np.asarray(fingerprint), **columns)
    atomic_write_bytes(path, buf.getvalue())


def _read_chunk(path: Path, model, fingerprint: str | None, lrs=None) -> SweepRun:
    """The chunk saved at ``path``; refuses one written by another sweep.

    ``fingerprint=None`` accepts any (for reading a finished sweep back).
    """
    with np.load(path, allow_pickle=False) as data:
        if fingerprint is not None and (
            str(data["fingerprint"]) != fingerprint
            or not np.array_equal(data["lrs"], lrs)
        ):
            raise ValueError(
                f"{path} was written by a different sweep configuration; resume "
                "with the same settings, or use a new output directory"
            )
        columns = {k: data[k] for k in data.files}
    return SweepRun(
        **{f: columns[f] for f in _FIELDS},
        **{f: columns.get(f) for f in _OPTIONAL},
        params=params_from_columns(columns, model),
    )


def load_members(checkpoint_dir, model) -> SweepRun:
    """All chunks saved in ``checkpoint_dir``, in order, as one SweepRun.

    ``model`` is the sweep's initial model (the template of the snapshots).
    """
    paths = sorted(Path(checkpoint_dir).glob("members-*.npz"))
    if not paths:
        raise FileNotFoundError(f"no saved sweep members in {checkpoint_dir}")
    runs = [_read_chunk(p, model, None) for p in paths]
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
    ckdir = Path(checkpoint_dir)
    ckdir.mkdir(parents=True, exist_ok=True)
    starts = range(0, lrs.size, chunk)
    bar = None
    if progress or (progress is None and sys.stderr.isatty()):
        from tqdm.auto import tqdm

        bar = tqdm(total=lrs.size, desc="sweep members", unit="member")
    runs, resumed = [], 0
    try:
        for i, start in enumerate(starts):
            part = lrs[start : start + chunk]
            path = chunk_path(ckdir, i)
            run = _read_chunk(path, model, fingerprint, part) if path.exists() else None
            if run is not None:
                resumed += 1
                log.info("chunk %d: %d members read back from %s", i, part.size, path)
            else:
                padded = np.concatenate([part, np.repeat(part[-1:], chunk - part.size)])
                run = _slice(
                    run_sweep(
                        loss_fn, model, optimizer, padded, t1=t1, mesh=mesh, **kwargs
                    ),
                    part.size,
                )
                _write_chunk(path, run, fingerprint)
                log.info("chunk %d: η = %s done", i, ", ".join(f"{x:g}" for x in part))
            runs.append(run)
            if bar is not None:
                bar.update(part.size)
    finally:
        if bar is not None:
            bar.close()
    info = {
        "t1": float(t1),
        "sharded_over": 1 if mesh is None else mesh.size,
        "chunk": chunk,
        "resumed_chunks": resumed,
    }
    return concatenate(runs, info)
