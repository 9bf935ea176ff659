"""A sweep over several processes: which process runs which chunk, and the two
collective steps, on JAX's distributed runtime (``jax.distributed``).

A sweep's members are cut into chunks (``gflow.runs.resumable_sweep``). With P
processes joined by ``jax.distributed.initialize``, each process runs the chunks
assigned to it, each as its own vmapped program on its own devices, and saves each
finished chunk at once in the checkpoint directory, which every process shares. No
compiled program spans processes: a chunk's adaptive loop (a ``while_loop`` over steps)
never waits on another process, and the processes meet only twice, at a barrier
before the run (every process sees the run directory and runs the same
configuration) and at one gather after it (the number of chunks each read back
instead of computing). Process 0 then reads every chunk from the shared directory, so
the gather moves a few integers, not the members; a killed process loses only its
unfinished chunk, since the others are on disk.

Assignment: a vmapped ``while_loop`` runs as long as its longest member, so chunk c
costs about t1 / min η over its members (steps). Chunks go out largest first, each to
the process with the least work so far (lowest index on ties): the longest-processing-
time rule, whose makespan is within 4/3 of the best. It depends only on the chunks and
P, so every process computes the same plan without talking to the others, and a run
resumed with another P reads back the same chunks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import numpy as np


@dataclasses.dataclass(frozen=True)
class Processes:
    """This process's place among the processes of one run.

    Attributes:
        index: this process, 0 .. count − 1; process 0 alone writes the run files.
        count: how many processes run the sweep.
    """

    index: int = 0
    count: int = 1

    def __post_init__(self):
        if self.count < 1:
            raise ValueError(f"count: need at least 1 process, got {self.count}")
        if not 0 <= self.index < self.count:
            raise ValueError(
                f"index: must lie in 0 .. {self.count - 1}, got {self.index}"
            )

    @property
    def main(self) -> bool:
        """Whether this is process 0, which gathers and writes."""
        return self.index == 0

    @classmethod
    def current(cls) -> Processes:
        """This process as ``jax.distributed`` numbered it (one process: 0 of 1)."""
        return cls(index=jax.process_index(), count=jax.process_count())


def assign(costs: Sequence[float], count: int) -> list[int]:
    """The process that runs each chunk, longest processing time first.

    Args:
        costs: the cost of each chunk (steps of its longest member), float [C].
        count: the number of processes.

    Returns:
        owner[c] in 0 .. count − 1 for each chunk c.
    """
    load = [0.0] * count
    owner = [0] * len(costs)
    for c in sorted(range(len(costs)), key=lambda c: (-costs[c], c)):
        p = min(range(count), key=lambda p: (load[p], p))
        owner[c] = p
        load[p] += costs[c]
    return owner


def deal(members: int, count: int) -> list[int]:
    """The process of each of ``members`` equal members (the seeds of a text run,
    the members of a training sweep): ``assign`` deals them out in turn."""
    return assign([1.0] * members, count)


def _allgather(values: np.ndarray, processes: Processes) -> np.ndarray:
    """``values`` of every process, stacked [P, ...] (a collective)."""
    if processes.count == 1:
        return np.asarray(values)[None]
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(np.asarray(values)))


def barrier(name: str, processes: Processes) -> None:
    """Wait until every process has reached the barrier ``name`` (a collective)."""
    if processes.count > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def failing(ok: bool, processes: Processes) -> list[int]:
    """The processes whose ``ok`` is False (a collective: every process calls it)."""
    flags = _allgather(np.asarray([bool(ok)], np.int32), processes)
    return [p for p in range(flags.shape[0]) if not flags[p, 0]]


def total(count: int, processes: Processes) -> int:
    """The sum of ``count`` over the processes (a collective)."""
    return int(_allgather(np.asarray([count], np.int64), processes).sum())
