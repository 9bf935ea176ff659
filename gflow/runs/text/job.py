"""``gflow text`` as a job: natural text, the flow (or small-step GD) and a
practical optimizer from one init, for one seed or several, over one process or
several.

Over P processes (``gflow.runs.job.AbstractMembersJob``, whose members are the
seeds here) each runs its share of the seeds and saves every run the moment it ends
(``gflow.runs.text.run.RunPieces``); process 0 reads the others' runs back from
the shared ``pieces/`` and alone writes the run directory. A run is the same
program on whichever process runs it, so the runs do not depend on P.
"""

from __future__ import annotations

import dataclasses
import io as _io
import logging
import time
from pathlib import Path

import numpy as np

from gflow.dynamics.trajectory import Trajectory
from gflow.runs.config import ConfigError
from gflow.runs.environment import environment
from gflow.runs.files import atomic_write_bytes, read_json, write_json
from gflow.runs.job import AbstractMembersJob, Context, Member, MembersResult, Units
from gflow.runs.run_dir import RunDirectory, RunFacts
from gflow.runs.stages import SeedSummary, StagesEntry, stages_table, write_stages
from gflow.runs.strategies import Strategies, text_strategies
from gflow.runs.text import run as text_run  # run_text via the module: stubbed
from gflow.runs.text.config import TextConfig
from gflow.runs.text.run import RunPieces, TextData
from gflow.runs.trajectory_files import save_trajectory
from gflow.text.positional import PositionalAttentionModel
from gflow.text.row_phases import describe, row_phases
from gflow.text.stability import stability_line, stability_warning
from gflow.text.subword import KINDS

log = logging.getLogger("gflow")


def _stages(traj: Trajectory) -> StagesEntry:
    """The stages of a run: ``gflow.detect_stages`` where its Markov observables
    apply, else ``detect_head_stages`` on the run's one attention head (the
    ``head_*`` metrics: ``HeadObservables`` on the fixed sample, with the tracked
    queries and the most frequent type as top)."""
    from gflow.analysis.head_stages import detect_head_stages
    from gflow.analysis.stages import detect_stages

    try:
        if "attention" in traj.metrics:
            return StagesEntry(True, tuple(detect_stages(traj)))
        metrics = {**traj.metrics, "sv_W_A": traj.metrics.get("head_sv_W_A")}
        view = dataclasses.replace(traj, metrics=metrics)
        found = tuple(detect_head_stages(view))
        return StagesEntry(True, found, rule="detect_head_stages")
    except Exception as e:  # its inputs may not fit a text run: record why
        return StagesEntry(False, why=f"{type(e).__name__}: {e}")


def text_facts(cfg: TextConfig, data: TextData) -> RunFacts:
    """What a text run's config.json holds besides the configuration: the
    vocabulary's size, the corpus's length, the tracked queries, the runs."""
    vocab = data.vocab
    return RunFacts(
        d_vocab=len(vocab),
        n_tokens=int(data.ids.shape[0]),
        unk_frequency=float(vocab.frequencies[vocab.unk_id]),
        queries={vocab.tokens[q]: q for q in data.queries},
        top=[vocab.tokens[i] for i in data.top],
        runs=[n for seed in cfg.seed_list for n in cfg.run_names(seed)],
    )


def write_text_files(out, data: TextData) -> None:
    """vocab.json and the trained subword tokeniser (tokenizer.json), so that
    ``--resume`` can rebuild the run's data."""
    out = Path(out)
    write_json(out / "vocab.json", data.vocab.frequency_table())
    if data.tokenizer is not None:  # the trained pieces, to reuse
        atomic_write_bytes(out / "tokenizer.json", data.tokenizer.to_json().encode())


def write_text_start(out, cfg: TextConfig, data: TextData) -> Path:
    """What a text run knows before it runs: config.json (``text_facts`` beside
    the configuration), vocab.json and tokenizer.json. (``gflow text`` writes the
    same through its driver; this is for scripts that run ``run_text`` by hand.)"""
    out = Path(out)
    RunDirectory(out).write_config("text", cfg, environment(), text_facts(cfg, data))
    write_text_files(out, data)
    return out


def write_text_run(out, runs: tuple[Member, ...]) -> tuple[Member, ...]:
    """One trajectory per run (``run_text``'s members; attention rows apart, in
    ``<run>_rows.npz``), row_phases.json (what each tracked row does,
    ``gflow.text.row_phases``), stages.json and, for several seeds,
    stages_summary.json; returns the members with their stages. Figures are drawn
    from these files."""
    out = Path(out)
    members, phases = [], {}
    for m in runs:
        name, traj, data = m.name, m.trajectory, m.data
        metrics = dict(traj.metrics)
        rows = metrics.pop("attention_rows", None)  # None: a Transformer
        final = traj.final
        if isinstance(final, PositionalAttentionModel):
            buf = _io.BytesIO()
            np.save(buf, np.asarray(final.W_pos))
            atomic_write_bytes(out / f"{name}_W_pos.npy", buf.getvalue())
            final = final.base
        saved = dataclasses.replace(traj, metrics=metrics, final=final, params=None)
        save_trajectory(out, saved, name=name)
        if rows is not None:
            buf = _io.BytesIO()
            np.savez(buf, t=traj.t, rows=rows, queries=np.asarray(data.queries))
            atomic_write_bytes(out / f"{name}_rows.npz", buf.getvalue())
            tokens = data.vocab.tokens
            phases[name] = {
                tokens[q]: row_phases(traj.t, rows[:, j], tokens, q)
                for j, q in enumerate(data.queries)
            }
        members.append(dataclasses.replace(m, stages=_stages(saved)))
    seeds = {m.name: m.seed for m in members}
    write_stages(out, {m.name: m.stages for m in members}, seeds)
    if phases:  # what each tracked query's row does (focus on, dilution from)
        write_json(out / "row_phases.json", phases)
    return tuple(members)


@dataclasses.dataclass(frozen=True)
class TextPlan:
    """A text run's configuration and its data (tokens, vocabulary, the fixed
    sample, the tracked queries)."""

    cfg: TextConfig
    data: TextData
    strategies: Strategies


class TextJob(AbstractMembersJob[TextConfig]):
    """``gflow text``: attention dynamics on natural text."""

    command = "text"
    config_type = TextConfig
    help = (
        "train on a text corpus (GD or flow, and an optimizer) and track attention rows"
    )
    description = (
        "Tokenise a corpus, cut a fixed sample of windows, follow the gradient flow "
        "with small-step GD (or Tsit5) and run a practical optimizer (Adam by "
        "default; SGD, AdamW, schedules, clipping) from the same init, for one seed "
        "or several; write config.json, vocab.json, metrics, the tracked queries' "
        "attention rows, stages.json (and, for several seeds, stages_summary.json) "
        "and figures. Every run is on the clock t = Σ η_k."
    )
    saved = "the runs finished so far are saved"
    unit = "seeds"

    def x64(self, cfg: TextConfig) -> bool:
        return cfg.x64

    def units(self, cfg: TextConfig) -> Units:
        return Units(cfg.seeds, "--seeds K")

    def resume(self, cfg: TextConfig, directory: RunDirectory) -> TextConfig:
        """A subword run is rebuilt with the tokeniser it trained (tokenizer.json);
        a run a launcher began (config.json without an environment yet) may not
        have trained it yet."""
        if cfg.tokenizer not in KINDS:
            return cfg
        tokenizer = directory.path / "tokenizer.json"
        if tokenizer.exists():
            return dataclasses.replace(cfg, tokenizer_file=str(tokenizer))
        if directory.read().launched:
            return cfg  # not started: the tokeniser is trained now
        raise ConfigError(
            f"--resume: {directory.path} has no tokenizer.json (its {cfg.tokenizer} "
            "tokeniser); the run cannot be rebuilt as it was"
        )

    def plan(self, cfg: TextConfig) -> TextPlan:
        start = time.perf_counter()
        strategies = text_strategies(cfg)  # the names become objects here, once
        try:
            data = text_run.prepare(cfg, strategies)
        except FileNotFoundError as e:
            raise ConfigError(f"corpus: {e}") from None
        except ConfigError:
            raise
        except ValueError as e:
            raise ConfigError(str(e)) from None
        log.info("prepared the data in %.2f s", time.perf_counter() - start)
        return TextPlan(cfg, data, strategies)

    def facts(self, plan: TextPlan) -> RunFacts:
        return text_facts(plan.cfg, plan.data)

    def start(self, plan: TextPlan, directory: RunDirectory, context: Context) -> None:
        write_text_files(directory.path, plan.data)
        if context.main and not context.quiet:
            data = plan.data
            names = ", ".join(repr(data.vocab.tokens[q]) for q in data.queries)
            print(
                f"{len(data.ids)} tokens, d={len(data.vocab)} types "
                f"(unknown {data.vocab.frequencies[data.vocab.unk_id]:.1%}); "
                f"tracking {names}"
            )

    def members(self, plan: TextPlan) -> list[int]:
        return list(plan.cfg.seed_list)

    def run(self, plan: TextPlan, directory: RunDirectory, context: Context):
        start = time.perf_counter()
        result = super().run(plan, directory, context)
        if result is None:
            return None
        return dataclasses.replace(result, wall={"runs": time.perf_counter() - start})

    def run_alone(self, plan: TextPlan, directory: RunDirectory, context: Context):
        """One process: every seed, the runs kept as computed (not read back)."""
        runs = self._run(plan, directory, context)
        return MembersResult(plan, runs, directory=directory)

    def run_members(self, plan, directory, context, mine: list[int]) -> int:
        self._run(plan, directory, context, seeds=[plan.cfg.seed_list[i] for i in mine])
        return 0

    def _run(self, plan: TextPlan, directory: RunDirectory, context: Context, **kw):
        """``run_text`` with a line per finished run (process 0) and, in one
        process, the signal watch and a flow's progress (t, step, solver)."""
        cfg, strategies = plan.cfg, plan.strategies
        if context.processes is None:
            method = context.watched(strategies.method)
            strategies = dataclasses.replace(strategies, method=method)
        done, count = [], len(cfg.seed_list) * len(cfg.base_names)

        def report(name, traj, resumed):
            done.append(name)
            if context.main and not context.quiet:
                how = "read back" if resumed else f"{traj.stats['wall_s']:.1f} s"
                print(f"[{len(done)}/{count}] {name} {traj.status} ({how})", flush=True)

        pieces = RunPieces(directory.path, cfg, plan.data)
        return text_run.run_text(
            cfg, plan.data, pieces=pieces, report=report, strategies=strategies, **kw
        )

    def read_members(self, plan, directory, owner, resumed) -> MembersResult:
        pieces = RunPieces(directory.path, plan.cfg, plan.data)
        try:
            runs = text_run.run_text(
                plan.cfg,
                plan.data,
                pieces=pieces,
                read_only=True,
                strategies=plan.strategies,
            )
        except FileNotFoundError as e:
            raise FileNotFoundError(
                f"{e} in {pieces.directory}; put the run directory on a "
                "filesystem that every process shares"
            ) from None
        return MembersResult(plan, runs, directory=directory)

    def write(self, result: MembersResult, directory: RunDirectory) -> MembersResult:
        start = time.perf_counter()
        runs = write_text_run(directory.path, result.runs)
        wall = {**result.wall, "save": time.perf_counter() - start}
        return dataclasses.replace(result, runs=runs, wall=wall)

    def summary(self, result: MembersResult) -> str:
        cfg, out = result.plan.cfg, result.directory.path
        lines = []
        for m in result.runs:
            name, traj = m.name, m.trajectory
            st, loss = traj.stats, traj.metrics["loss"]
            lines.append(
                f"{name} {traj.status}: t={traj.t[-1]:g}, "
                f"loss {loss[0]:.4f} -> {loss[-1]:.4f}, "
                f"{st['wall_s']:.1f} s (loop {st['loop_s']:.1f} s, "
                f"observables {st['observe_s']:.1f} s)"
            )
            if "stability" in traj.info:
                check = traj.info["stability"]
                lines.append(f"  {stability_line(check)} ({st['sharpness_s']:.1f} s)")
                warning = stability_warning(name, check)
                if warning:
                    lines.append(warning)
        if (out / "row_phases.json").exists():  # the first seed's runs
            phases = read_json(out / "row_phases.json")
            lines.append("what each tracked row does (gflow.text.row_phases):")
            for name in cfg.run_names(cfg.seed):
                for query, moves in phases.get(name, {}).items():
                    lines.append(f"  {name} {query!r}: {describe(moves)}")
        if cfg.seeds > 1:
            summary = read_json(out / "stages_summary.json")
            lines.append(stages_table(SeedSummary.from_json(summary)))
        parts = ", ".join(f"{k} {v:.1f} s" for k, v in result.wall.items())
        lines.append(f"wrote {len(result.runs)} run(s) ({parts})")
        return "\n".join(lines)
