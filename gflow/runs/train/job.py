"""``gflow train`` as a job: one training run, or a sweep of members over seeds and
step sizes, over one process or several."""

from __future__ import annotations

import dataclasses

from gflow.runs.config import ConfigError
from gflow.runs.files import atomic_write_bytes
from gflow.runs.job import AbstractMembersJob, Context, Member, MembersResult, Units
from gflow.runs.run_dir import RunDirectory, RunFacts
from gflow.runs.stages import StagesEntry
from gflow.runs.strategies import train_strategies
from gflow.runs.train import run as train_run  # run_train via the module: stubbed
from gflow.runs.train.config import TrainRun
from gflow.runs.train.members import gather, run_members, write_sweep_run
from gflow.runs.train.run import TrainData, prepare, write_train_run


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
        done = []

        def finished(name, traj):
            done.append(name)
            if context.main and not context.quiet:
                how = traj.stats["resumed_pieces"]
                print(
                    f"[{len(done)}] {name} {traj.status} ({how} segment(s) read back)",
                    flush=True,
                )

        cfg = plan.cfg
        return run_members(cfg.base, cfg.sweep, directory.path, mine, finished)

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
        method = strategies.method.watched(context.interrupt)
        if not context.quiet:  # a flow shows its t, step size and solver
            method = method.shown()
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
        if result.plan.cfg.sweep.is_sweep:
            runs = write_sweep_run(directory.path, result.runs)
            return dataclasses.replace(result, runs=runs)
        (m,) = result.runs  # the layout of one run: train.json, a list of stages
        unigram = m.data.references.get("unigram_loss")
        found = write_train_run(directory.path, m.trajectory, unigram_loss=unigram)
        stages = StagesEntry(True, tuple(found))
        return dataclasses.replace(
            result, runs=(dataclasses.replace(m, stages=stages),)
        )

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
