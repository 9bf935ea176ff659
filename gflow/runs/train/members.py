"""A training sweep over seeds and step sizes (``gflow train --seeds K --lrs ...``),
as one run directory, over one process or several.

A sweep's members are the configurations ``cfg`` with ``lr`` from ``lrs`` (outer)
and ``seed`` from ``seed`` .. ``seed`` + ``seeds`` − 1 (inner), each an ordinary
training run (``gflow.runs.train_run.run_train``) with its own held-out sample,
batches and init. A member's segments are checkpointed in ``checkpoint/<name>/``,
so an interrupted sweep resumes losing only the segments that were running.

Over P processes (``gflow.runs.job.AbstractMembersJob``) each process runs the
members that ``deal`` gives it (``run_members``) and saves their segments in the
shared ``checkpoint/``; process 0 then reads every member back from there
(``gather``) and alone writes the files.
A member is the same program, with the same inputs, on whichever process runs it,
so its result does not depend on P.

Layout: config.json (``members`` lists the names, ``sweep`` the seeds and step
sizes), one trajectory per member named ``train_lr<η>_s<seed>`` (the ``lr`` part
only with ``lrs``, the ``s`` part only with ``seeds`` > 1) beside each other, as
``load_run`` reads them, stages.json as ``{member: {"available", "stages"}}``,
stages_summary.json (stage times as mean ± sd over the seeds, per step size) for
several seeds, and each member's figures in ``figures/<member>/``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from gflow.runs.distributed import deal
from gflow.runs.job import Member
from gflow.runs.stages import StagesEntry, write_stages
from gflow.runs.train import run as train_run  # run_train via the module: stubbed
from gflow.runs.train.config import TrainConfig, TrainSweep
from gflow.runs.train.run import TrainData, prepare, write_train_run


def _data(member: TrainConfig, cache: dict) -> TrainData:
    """``prepare(member)``, shared by members that differ in their step size only."""
    key = dataclasses.replace(member, lr=TrainConfig.lr)
    if key not in cache:
        cache[key] = prepare(member)
    return cache[key]


def run_members(
    cfg: TrainConfig,
    sweep: TrainSweep,
    run_dir,
    mine: list[int] | None = None,
    finished=None,
) -> int:
    """Train the members at the indices ``mine`` (default: every one) into
    ``run_dir/checkpoint/<name>/``; returns how many segments were read back
    instead of computed. ``finished(name, traj)`` is called after each member.
    """
    members = sweep.members(cfg)
    cache: dict = {}
    resumed = 0
    for i in range(len(members)) if mine is None else mine:
        name, member = members[i]
        traj = train_run.run_train(
            member, _data(member, cache), checkpoint_dir=_checkpoint(run_dir, name)
        )
        resumed += traj.stats["resumed_pieces"]
        if finished is not None:
            finished(name, traj)
    return resumed


def _checkpoint(run_dir, name: str) -> Path:
    return Path(run_dir) / "checkpoint" / name


def gather(
    cfg: TrainConfig, sweep: TrainSweep, run_dir, count: int = 1
) -> tuple[Member, ...]:
    """Every member read back from ``run_dir/checkpoint`` (none is computed here).
    FileNotFoundError names a member whose segments are not all there, and the
    process of ``count`` that ran it."""
    members = sweep.members(cfg)
    owner = deal(len(members), count)
    cache: dict = {}
    out = []
    for (name, member), p in zip(members, owner):
        data = _data(member, cache)
        try:
            traj = train_run.run_train(
                member, data, checkpoint_dir=_checkpoint(run_dir, name), read_only=True
            )
        except FileNotFoundError as e:
            raise FileNotFoundError(
                f"member {name}, run by process {p} of {count}: {e}; put the run "
                "directory on a filesystem that every process shares"
            ) from None
        out.append(Member(name, member.seed, member, data, traj))
    return tuple(out)


def write_sweep_run(run_dir, members: tuple[Member, ...]) -> tuple[Member, ...]:
    """Every member's trajectory, stages.json and, for several seeds,
    stages_summary.json; returns the members with their stages."""
    out = []
    for m in members:
        found = write_train_run(
            run_dir,
            m.trajectory,
            name=m.name,
            stages_file=None,
            unigram_loss=m.data.references.get("unigram_loss"),
        )
        out.append(dataclasses.replace(m, stages=StagesEntry(True, tuple(found))))
    write_stages(
        run_dir, {m.name: m.stages for m in out}, {m.name: m.seed for m in out}
    )
    return tuple(out)
