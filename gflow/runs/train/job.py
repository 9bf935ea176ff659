"""``gflow train`` as a job: one training run, or a sweep of members over seeds and
step sizes, over one process or several.

A sweep's members are the configurations ``cfg`` with ``lr`` from ``lrs`` (outer)
and ``seed`` from ``seed`` .. ``seed`` + ``seeds`` − 1 (inner), each an ordinary
training run (``gflow.runs.train_run.run_train``) with its own held-out sample,
batches and init. A member's segments are checkpointed in ``checkpoint/<name>/``,
so an interrupted sweep resumes losing only the segments that were running.

Over P processes (``gflow.runs.job.AbstractMembersJob``) each process runs the
members that ``deal`` gives it (``TrainJob.run_members``) and saves their segments
in the shared ``checkpoint/``; process 0 then reads every member back from there
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

from gflow.runs.config import ConfigError
from gflow.runs.distributed import deal
from gflow.runs.files import atomic_write_bytes
from gflow.runs.job import AbstractMembersJob, Context, Member, MembersResult, Units
from gflow.runs.run_dir import RunDirectory, RunFacts
from gflow.runs.stages import StagesEntry, write_stages
from gflow.runs.strategies import train_strategies
from gflow.runs.train import run as train_run  # run_train via the module: stubbed
from gflow.runs.train.config import TrainConfig, TrainRun, TrainSweep
from gflow.runs.train.run import TrainData, prepare, write_train_run


def _data(member: TrainConfig, cache: dict) -> TrainData:
    """``prepare(member)``, shared by members that differ in their step size only."""
    key = dataclasses.replace(member, lr=TrainConfig.lr)
    if key not in cache:
        cache[key] = prepare(member)
    return cache[key]


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


@dataclasses.dataclass(frozen=True)
class TrainPlan:
    """A training run's configuration and its data (the first member's: the
    members of a sweep share the data where only their step sizes differ)."""

    cfg: TrainRun
    data: TrainData


class TrainJob(AbstractMembersJob[TrainRun]):
    """``gflow train``: a Transformer trained with optax; per-head stages."""

    command = "train"
    config_type = TrainRun
    help = (
        "train the attention model or a Transformer (optimizer, GD or the flow) and "
        "find per-head stages"
    )
    description = (
        "Train the paper's attention model or a causal Transformer of any depth, "
        "width and parts with an optax optimizer on fresh minibatches, or descend a "
        "fixed sample (or the Markov population loss) with the optimizer, GD or the "
        "gradient flow (Markov sequences, in-context Markov chains or a text corpus "
        "with any tokeniser), on the shared clock t = Σ η; record the "
        "loss and per-head attention observables on a held-out sample; write "
        "config.json, metrics, parameter snapshots, per-head stages.json and "
        "figures. Checkpointed after each segment: an interrupted run continues "
        "with --resume RUN_DIR. --seeds and --lrs train one member per seed and "
        "step size into one run directory, over several processes with --processes."
    )
    saved = "the segments finished so far are saved"

    def x64(self, cfg: TrainRun) -> bool:
        return cfg.base.x64

    def units(self, cfg: TrainRun) -> Units:
        return Units(len(cfg.sweep.members(cfg.base)), "--seeds K, --lrs")

    def plan(self, cfg: TrainRun) -> TrainPlan:
        first = cfg.sweep.members(cfg.base)[0][1]
        try:
            return TrainPlan(cfg, prepare(first))
        except (FileNotFoundError, ValueError) as e:
            raise ConfigError(f"data: {e}") from None

    def facts(self, plan: TrainPlan) -> RunFacts:
        members = None
        if plan.cfg.sweep.is_sweep:
            members = [name for name, _ in plan.cfg.sweep.members(plan.cfg.base)]
        return RunFacts(
            references=plan.data.references, d_vocab=plan.data.d_vocab, members=members
        )

    def start(self, plan: TrainPlan, directory: RunDirectory, context: Context) -> None:
        if plan.data.tokenizer is not None:  # the trained pieces, to read or reuse
            atomic_write_bytes(
                directory.path / "tokenizer.json",
                plan.data.tokenizer.to_json().encode(),
            )

    def members(self, plan: TrainPlan) -> list[str]:
        return [name for name, _ in plan.cfg.sweep.members(plan.cfg.base)]

    def run_alone(self, plan: TrainPlan, directory: RunDirectory, context: Context):
        if plan.cfg.sweep.is_sweep:
            return super().run_alone(plan, directory, context)
        return self._run_one(plan, directory, context)

    def run_members(self, plan, directory, context, mine: list[int]) -> int:
        """Train the members at the indices ``mine`` into
        ``checkpoint/<name>/``; returns how many segments were read back."""
        members = plan.cfg.sweep.members(plan.cfg.base)
        cache: dict = {}
        resumed = 0
        for done, i in enumerate(mine, 1):
            name, member = members[i]
            traj = train_run.run_train(
                member,
                _data(member, cache),
                checkpoint_dir=_checkpoint(directory.path, name),
            )
            how = traj.stats["resumed_pieces"]
            resumed += how
            if context.main and not context.quiet:
                print(
                    f"[{done}] {name} {traj.status} ({how} segment(s) read back)",
                    flush=True,
                )
        return resumed

    def read_members(self, plan, directory, owner, resumed) -> MembersResult:
        count = max(owner) + 1
        runs = gather(plan.cfg.base, plan.cfg.sweep, directory.path, count)
        return MembersResult(plan, runs, resumed, count)

    def _run_one(self, plan: TrainPlan, directory: RunDirectory, context: Context):
        cfg = plan.cfg.base
        bar = None
        if not context.quiet:
            from tqdm.auto import tqdm

            bar = tqdm(total=cfg.segments, desc="train segments", unit="segment")

        def progress(i, n, resumed):
            if bar is not None:
                bar.update(1)

        strategies = train_strategies(cfg)
        method = context.watched(strategies.method)
        strategies = dataclasses.replace(strategies, method=method)
        try:
            traj = train_run.run_train(
                cfg,
                plan.data,
                checkpoint_dir=directory.checkpoint,
                progress=progress,
                strategies=strategies,
            )
        finally:
            if bar is not None:
                bar.close()
        runs = (Member("train", cfg.seed, cfg, plan.data, traj),)
        return MembersResult(plan, runs, traj.stats["resumed_pieces"])

    def write(self, result: MembersResult, directory: RunDirectory) -> MembersResult:
        """Every member's trajectory and stages: for one run the layout of one run
        (train.json, stages.json a list of stages), for a sweep stages.json of
        every member and, for several seeds, stages_summary.json."""
        one = not result.plan.cfg.sweep.is_sweep
        runs = []
        for m in result.runs:
            found = write_train_run(
                directory.path,
                m.trajectory,
                name=m.name,
                stages_file="stages.json" if one else None,
                unigram_loss=m.data.references.get("probe_unigram_loss"),
            )
            runs.append(dataclasses.replace(m, stages=StagesEntry(True, tuple(found))))
        if not one:
            names = {m.name: m.stages for m in runs}
            write_stages(directory.path, names, {m.name: m.seed for m in runs})
        return dataclasses.replace(result, runs=tuple(runs))

    def summary(self, result: MembersResult) -> str:
        opt = result.plan.cfg.base.label
        one = not result.plan.cfg.sweep.is_sweep
        lines = []
        for m in result.runs:
            name, traj, stages = m.name, m.trajectory, m.stages.stages
            loss = traj.metrics["loss"]
            heads = {(s.layer, s.head) for s in stages if s.layer >= 0}
            what = (
                f"t={traj.t[-1]:.4g}, loss {loss[0]:.4f} -> {loss[-1]:.4f}, "
                f"{len(stages)} stages in {len(heads)} heads"
            )
            if one:
                resumed = result.resumed
                lines.append(
                    f"train {opt} {traj.status}: {what}"
                    + (f", {resumed} segment(s) resumed" if resumed else "")
                )
            else:
                lines.append(f"  {name} {traj.status}: {what}")
        if not one:
            parts = [f"{result.resumed} segment(s) resumed"] * bool(result.resumed)
            parts += [f"{result.processes} processes"] * (result.processes > 1)
            head = f"train {opt}, {len(result.runs)} members"
            lines.append(head + (": " + ", ".join(parts) if parts else ""))
        return "\n".join(lines)
