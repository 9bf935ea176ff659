"""Sweeps that survive interruption: members run in chunks, each chunk saved at once.

``run_sweep`` runs every member in one vmapped program, so a killed sweep would lose
all of them. ``run_sweep_resumable`` cuts the step sizes into chunks of ``chunk``
members, runs each chunk with ``run_sweep`` (padded to ``chunk`` members, so every
chunk is the same compiled program); each chunk is one piece of the checkpoint driver
(``gflow.runs.checkpoint``), written atomically to ``checkpoint_dir/members-<i>.npz``
before the next one starts. Called again with the same directory and fingerprint,
finished chunks are read back instead of recomputed (a chunk of another configuration
is refused); the same chunk size gives bit-identical members. A chunk read back is
verified (its recorded index and checksum): a damaged chunk, or one copied over
another, is refused in one line that names its file.

Over several processes (``gflow.runs.distributed``) each process runs and saves only
the chunks assigned to it; after one gather, process 0 reads all chunks back from the
shared directory and returns the sweep, the others return None. Chunks are the same
whatever the number of processes, so a sweep started with P processes resumes with
any other number, and its members are bit for bit those of one process.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

from gflow.dynamics.interrupt import call_interruptibly
from gflow.dynamics.sweep import SweepRun, run_sweep
from gflow.runs.checkpoint import PieceStore, run_pieces
from gflow.runs.distributed import Processes, assign, total
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
    """All chunks saved in ``checkpoint_dir``, in the order of their indices, as one
    SweepRun.

    ``model`` is the sweep's initial model (the template of the snapshots). Each
    chunk is read by the index in its name (``members-<i>.npz``), so a chunk not
    saved (a sweep interrupted over several processes) leaves a gap instead of a
    crash, and a file whose name holds no index is not a chunk; a chunk is verified
    as ``PieceStore.load`` does (a damaged or misplaced one is a ConfigError).
    """
    store = PieceStore(checkpoint_dir, _PREFIX, None)
    indices = [
        int(tail)
        for path in store.paths()
        if (tail := path.stem.rsplit("-", 1)[1]).isdigit()
        and store.path(int(tail)) == path
    ]
    if not indices:
        raise FileNotFoundError(f"no saved sweep members in {checkpoint_dir}")
    runs = [_from_columns(store.load(i), model) for i in indices]
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


class _Chunks(PieceStore):
    """The pieces ``indices`` of ``store``, numbered 0 .. len(indices) − 1 (the chunks
    of one process, for ``run_pieces``)."""

    def __init__(self, store: PieceStore, indices: list[int]):
        super().__init__(store.directory, store.prefix, store.fingerprint)
        self.indices = indices

    def path(self, i: int) -> Path:
        return super().path(self.indices[i])


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
    processes: Processes | None = None,
    interrupt: Callable[[], bool] | None = None,
    **kwargs,
) -> SweepRun | None:
    """``run_sweep`` in chunks of ``chunk`` members, each checkpointed when done.

    Args:
        loss_fn, model, optimizer, lrs, t1, mesh, **kwargs: as in ``run_sweep``.
        checkpoint_dir: where finished chunks are kept; chunks found there are
            loaded, not recomputed (ConfigError, a ValueError, if their
            ``fingerprint`` or step sizes differ or a chunk is damaged).
        fingerprint: a string that identifies everything else that determines the
            members (the caller's resolved configuration).
        chunk: members per compiled program; rounded up to a multiple of the mesh
            size. Smaller chunks lose less to an interruption; larger ones vectorise
            more.
        progress: a progress bar over chunks; None shows one when stderr is a
            terminal.
        processes: this process among several that share ``checkpoint_dir`` (every
            one of them calls this function with the same arguments); None: one.
        interrupt: whether a signal arrived (``gflow.dynamics.interrupt.
            SignalWatch``): each chunk then runs through ``call_interruptibly``,
            so a signal ends the wait for it at once (``KeyboardInterrupt``) and
            the chunk is not saved: the finished chunks stay, and a resumed sweep
            computes the interrupted one again. The vmapped loops of a chunk have
            no place to ask a host callback each few steps (under ``vmap`` a
            conditional callback runs at every step), so the chunk is abandoned
            rather than stopped; its members are those of an uninterrupted call,
            bit for bit (the same program). None: a chunk runs to its end before
            a signal's handler runs.

    Returns:
        The SweepRun of all members (None on processes other than 0);
        ``info["resumed_chunks"]`` counts the chunks read back from
        ``checkpoint_dir``, ``info["processes"]`` the processes that ran them.
    """
    processes = processes or Processes()
    lrs = np.asarray(lrs, float).ravel()
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    if mesh is not None:
        chunk = mesh.size * math.ceil(chunk / mesh.size)
    parts = [lrs[start : start + chunk] for start in range(0, lrs.size, chunk)]
    owners = assign([t1 / part.min() for part in parts], processes.count)
    mine = [i for i, owner in enumerate(owners) if owner == processes.index]

    def compute(i, previous):
        part = parts[i]
        padded = np.concatenate([part, np.repeat(part[-1:], chunk - part.size)])
        run = call_interruptibly(
            run_sweep,
            loss_fn,
            model,
            optimizer,
            padded,
            t1=t1,
            mesh=mesh,
            interrupt=interrupt,
            **kwargs,
        )
        return _columns(_slice(run, part.size))

    bar = None
    if progress or (progress is None and sys.stderr.isatty()):
        from tqdm.auto import tqdm

        members = sum(parts[i].size for i in mine)
        bar = tqdm(total=members, desc="sweep members", unit="member")
    read_back = []

    def finished(i, columns, was_resumed):
        read_back.append(was_resumed)
        verb = "read back" if was_resumed else "done"
        log.info("chunk %d: η = %s %s", i, _etas(parts[i]), verb)
        if bar is not None:
            bar.update(parts[i].size)

    store = PieceStore(checkpoint_dir, _PREFIX, fingerprint)
    try:
        pieces = run_pieces(
            _Chunks(store, mine),
            len(mine),
            lambda j, previous: compute(mine[j], previous),
            expect=lambda j: {"lrs": parts[mine[j]]},
            finished=lambda j, columns, was_resumed: finished(
                mine[j], columns, was_resumed
            ),
        )
    finally:
        if bar is not None:
            bar.close()
    # a collective: once it returns, every process has saved its chunks
    resumed = total(sum(read_back), processes)
    if not processes.main:
        return None
    if processes.count > 1:  # every chunk, the others' read back
        runs = [
            _gathered(store, i, parts[i], owners[i], model) for i in range(len(parts))
        ]
    else:
        runs = [_from_columns(columns, model) for columns in pieces]
    info = {
        "t1": float(t1),
        "sharded_over": 1 if mesh is None else mesh.size,
        "chunk": chunk,
        "resumed_chunks": resumed,
        "processes": processes.count,
    }
    return concatenate(runs, info)


def _gathered(
    store: PieceStore, i: int, lrs: np.ndarray, owner: int, model
) -> SweepRun:
    """Chunk ``i`` as process ``owner`` saved it in the shared directory (its
    snapshots shaped as ``model``)."""
    columns = store.load(i, {"lrs": lrs})
    if columns is None:
        raise FileNotFoundError(
            f"chunk {i}, run by process {owner}, is not in {store.directory}: process "
            "0 reads the chunks the others saved, so the run directory must be on a "
            "filesystem that every process shares"
        )
    if owner != 0:
        log.info("chunk %d: η = %s from process %d", i, _etas(lrs), owner)
    return _from_columns(columns, model)


def _etas(lrs) -> str:
    return ", ".join(f"{x:g}" for x in lrs)
