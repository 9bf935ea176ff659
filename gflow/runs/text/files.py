"""The files of a text run directory (``gflow text``): what is known before the runs
(``write_text_start``) and, after them, every run's trajectory, attention rows, row
phases and stages (``write_text_run``)."""

from __future__ import annotations

import dataclasses
import io as _io
from pathlib import Path

import numpy as np

from gflow.dynamics.trajectory import Trajectory
from gflow.runs.environment import environment
from gflow.runs.files import atomic_write_bytes, write_json
from gflow.runs.job import Member
from gflow.runs.run_dir import RunDirectory, RunFacts
from gflow.runs.stages import StagesEntry, write_stages
from gflow.runs.text.config import TextConfig
from gflow.runs.text.run import TextData
from gflow.runs.trajectory_files import save_trajectory
from gflow.text.positional import PositionalAttentionModel
from gflow.text.row_phases import row_phases


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
