"""A configured text run (``gflow text``): data, model, the flow or small-step GD, and
a practical optimizer (Adam by default) from the same init, for one seed or several,
saved as a run directory.

The second arm ("the optimizer arm") is ``optimizer`` = gd, sgd, adam or adamw with a
constant or warmup-cosine step size, optional global-norm clipping and AdamW's weight
decay. gd runs on the fixed sample (full batch, ``batch`` = 0); sgd is the same update
on ``batch`` fresh random windows each step (``batch`` > 0); adam and adamw run either
way. Every run is on the shared clock t = Σ η_k, so a scheduled run lines up with the
flow.

``seeds`` = K runs seeds seed, seed+1, ..., seed+K-1 (each its own init and batches)
in one process: a loop that reuses every compiled program (the full-batch loop, the
minibatch loop, the observables), since a vmapped loop over seeds did not pay on CPU
(benchmarks/text_seeds.py). With K > 1 the runs are named ``<run>_s<seed>`` and
stages_summary.json holds each stage's time as mean ± sd over the seeds.

Each finished run is saved the moment it ends as one checkpoint piece
``pieces/<name>-000.npz`` (``RunPieces``) stamped with the fingerprint of its
configuration and data, so that an interrupted ``gflow text`` continues with
``--resume RUN_DIR`` and loses at most the run it was in; a piece of another
configuration is refused rather than mixed in.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import jax
import numpy as np
import optax

from gflow.analysis.head_observables import HeadObservables
from gflow.dynamics.trajectory import Trajectory
from gflow.runs.checkpoint import PieceStore, config_fingerprint
from gflow.runs.files import to_json
from gflow.runs.job import Member
from gflow.runs.strategies import Strategies, text_strategies
from gflow.runs.text.config import PAPER_QUERIES, TextConfig
from gflow.runs.trajectory_files import param_columns, params_from_columns
from gflow.text.corpus import load_corpus
from gflow.text.observables import TextObservables, default_queries, observe_saves
from gflow.text.positional import TextLoss
from gflow.text.strategies import FullBatchOptimizer
from gflow.text.subword import SubwordTokenizer
from gflow.text.tokenize import Vocabulary
from gflow.text.train import run_minibatch
from gflow.text.windows import WindowStream, fixed_sample, query_windows


@dataclasses.dataclass(frozen=True)
class TextData:
    """The tokenised corpus and what a run derives from it."""

    vocab: Vocabulary
    ids: np.ndarray  # int32 [n_tokens]
    sample: np.ndarray  # int32 [windows, context + 1]
    queries: tuple[int, ...]
    top: tuple[int, ...]
    tokenizer: SubwordTokenizer | None = None
    row_sample: np.ndarray | None = None  # int32 [r, context + 1]: the rows' extra


def prepare(cfg: TextConfig, strategies: Strategies | None = None) -> TextData:
    """Load, tokenise, build the vocabulary, cut the fixed sample, pick queries."""
    strategies = strategies or text_strategies(cfg)
    text = load_corpus(cfg.corpus, max_chars=cfg.max_chars, download=cfg.download)
    toks, vocab, subword = strategies.tokenization.cut(text)
    ids = vocab.encode(toks)
    sample = fixed_sample(ids, length=cfg.context, num=cfg.windows)
    try:
        named = [vocab.id(t) for t in cfg.track]
    except ValueError as e:
        raise ValueError(f"track: {e}") from None
    if not cfg.track:  # the paper's rows where the vocabulary has them
        named = [vocab.id(t) for t in PAPER_QUERIES if t in vocab.tokens]
    auto = default_queries(vocab, sample, num=cfg.num_queries)
    queries = tuple(dict.fromkeys([*named, *auto]))
    top = tuple(range(min(cfg.topk, len(vocab))))  # ids are ranks by frequency
    rows = query_windows(ids, queries, length=cfg.context, per_query=cfg.row_windows)
    return TextData(vocab, ids, sample, queries, top, subword, rows)


def init_model(
    cfg: TextConfig,
    d: int,
    seed: int | None = None,
    strategies: Strategies | None = None,
):
    """The initial model of ``seed`` (default ``cfg.seed``). The draw runs as one
    jitted program (eagerly each of its random normals would be compiled on its own,
    seconds each when busy), compiled once per model shape: the key is traced."""
    model = (strategies or text_strategies(cfg)).model
    key = jax.random.key(cfg.seed if seed is None else seed)
    return model.init(d, key, np.float64 if cfg.x64 else np.float32)


def arm_transform(
    cfg: TextConfig, dtype=np.float32, strategies: Strategies | None = None
):
    """The optax transformation of a minibatch optimizer arm: the optimizer's
    plain optax rule (``optax.sgd``, ``optax.adam``, ``optax.adamw``) at the
    schedule's step size, after ``optax.clip_by_global_norm`` when ``clip`` > 0.
    Plain optax, as a hand-written loop would call it (the injected hyperparameters
    of ``AbstractOptimizer.transform`` round differently in float32)."""
    strategies = strategies or text_strategies(cfg)
    tx = strategies.optimizer.plain(strategies.schedule.rate(dtype))
    if cfg.clip > 0:
        tx = optax.chain(optax.clip_by_global_norm(cfg.clip), tx)
    return tx


def _observed(traj: Trajectory, obs, heads, loop_s: float) -> Trajectory:
    """``traj`` with the text observables and the head observables (``head_*``, for
    the stage rules) computed from its parameter snapshots (NaN after a divergence,
    like its other metrics); the snapshots are dropped. Records the loop's and the
    observables' wall time (compilation included)."""
    start = time.perf_counter()
    extra = {} if obs is None else observe_saves(obs, traj)
    for k, v in observe_saves(heads, traj).items():
        if k.startswith("head_") or k == "sv_W_A" or obs is None:
            extra[HEAD_METRICS.get(k, k)] = v
    wall = {"loop_s": loop_s, "observe_s": time.perf_counter() - start}
    return dataclasses.replace(
        traj,
        metrics={**traj.metrics, **extra},
        params=None,
        stats={**traj.stats, **wall, "wall_s": sum(wall.values())},
    )


#: Head observables kept under another name in a text run's metrics (the text
#: observables have their own ``sv_W_A``, the top 4 singular values).
HEAD_METRICS = {"sv_W_A": "head_sv_W_A"}


def text_fingerprint(cfg, data) -> str:
    """The hash of a text run's configuration (``TextConfig``, through
    ``config_fingerprint``) and data (``TextData``)."""
    return config_fingerprint(
        cfg,
        np.asarray(data.sample),
        np.asarray(data.row_sample),
        vocab=list(data.vocab.tokens),
        queries=list(data.queries),
        top=list(data.top),
    )


class RunPieces:
    """The finished runs of one text run directory (``directory/pieces``)."""

    def __init__(self, directory, cfg, data):
        self.directory = Path(directory) / "pieces"
        self.fingerprint = text_fingerprint(cfg, data)

    def _store(self, name: str) -> PieceStore:
        return PieceStore(self.directory, name, self.fingerprint)

    def save(self, name: str, traj: Trajectory) -> None:
        """Write run ``name`` (no parameter snapshots: the observables are in its
        metrics) atomically."""
        if traj.params is not None:
            raise ValueError("save the observed run, without parameter snapshots")
        columns = {"t": np.asarray(traj.t)}
        columns |= {f"metric:{k}": np.asarray(v) for k, v in traj.metrics.items()}
        columns |= param_columns(traj.final)
        columns["status"] = np.asarray(traj.status)
        columns["stats"] = np.asarray(to_json(traj.stats, indent=None))
        columns["info"] = np.asarray(to_json(traj.info, indent=None))
        self.directory.mkdir(parents=True, exist_ok=True)
        self._store(name).save(0, columns)

    def load(self, name: str, template) -> Trajectory | None:
        """Run ``name`` as saved (its final model shaped as ``template``), or None
        if it has not finished. Raises ValueError for a piece of another run."""
        columns = self._store(name).load(0)
        if columns is None:
            return None
        final = params_from_columns(columns, template)
        return Trajectory(
            t=columns["t"],
            metrics={
                k.removeprefix("metric:"): v
                for k, v in columns.items()
                if k.startswith("metric:")
            },
            final=final,
            status=str(columns["status"]),
            stats=json.loads(str(columns["stats"])),
            info=json.loads(str(columns["info"])),
        )


def run_text(
    cfg: TextConfig,
    data: TextData,
    pieces=None,
    report=None,
    *,
    seeds=None,
    read_only: bool = False,
    strategies: Strategies | None = None,
) -> tuple[Member, ...]:
    """Every seed's deterministic run (``cfg.method``) and optimizer arm, each pair
    from one init, as members named as ``cfg.run_names``.

    The loops save parameter snapshots only; the text observables are computed from
    them afterwards (``observe_snapshots``), so the compiled loops hold nothing but
    the loss gradient. Full-batch GD and every full-batch arm share one compiled loop
    (``run_full_batch``: method, step sizes, decay, clipping and steps are traced),
    and the seeds run in a loop that reuses every compiled program.

    ``pieces`` (a ``RunPieces``) saves each run as it ends and reads back those
    already saved (a resumed run); ``report(name, traj, resumed)`` is called after
    each run. ``seeds``: the seeds to run (default ``cfg.seed_list``; one process's
    share of several); ``read_only``: every run was saved in ``pieces`` (by other
    processes) and is read back, FileNotFoundError naming a run that was not.
    ``strategies``: what the names of ``cfg`` stand for (default: built from them).
    """
    strategies = strategies or text_strategies(cfg)
    d = len(data.vocab)
    loss = TextLoss(data.sample, d_vocab=d, all_positions=cfg.all_positions)
    obs = None  # a Transformer's observables are the per-head ones only
    if strategies.model.rows:
        obs = TextObservables(
            data.sample,
            list(data.queries),
            list(data.top),
            d_vocab=d,
            row_windows=data.row_sample,
        )
    heads = HeadObservables(data.sample, data.top[0], list(data.queries))
    dtype = np.float64 if cfg.x64 else np.float32
    shared = {}  # built once for all seeds, so that no program is compiled twice
    if cfg.opt_steps and cfg.batch:
        shared["stream"] = WindowStream(data.ids, length=cfg.context, batch=cfg.batch)
        shared["tx"] = arm_transform(cfg, dtype, strategies)
    runs = []
    for seed in cfg.seed_list if seeds is None else seeds:
        model = init_model(cfg, d, seed, strategies)
        for name, arm in zip(cfg.run_names(seed), (_reference, _arm)):
            traj = None if pieces is None else pieces.load(name, model)
            resumed = traj is not None
            if not resumed and read_only:
                raise FileNotFoundError(f"run {name} (seed {seed}) was not saved")
            if not resumed:
                start = time.perf_counter()
                traj = arm(cfg, seed, model, loss, shared, strategies)
                loop_s = time.perf_counter() - start
                if arm is _reference:
                    traj = strategies.method.checked(loss, traj, seed)  # timed apart
                traj = _observed(traj, obs, heads, loop_s)
                traj = dataclasses.replace(traj, info={**traj.info, "seed": seed})
                if pieces is not None:
                    pieces.save(name, traj)
            runs.append(Member(name, seed, cfg, data, traj))
            if report is not None:
                report(name, traj, resumed)
    return tuple(runs)


def _reference(cfg, seed, model, loss, shared, strategies) -> Trajectory:
    """The deterministic run of one seed (``strategies.method``: full-batch GD of
    step ``lr`` or the flow to ``steps``·``lr``), with parameter snapshots."""
    return strategies.method.run(loss, model)


def _arm(cfg, seed, model, loss, shared, strategies) -> Trajectory:
    """The optimizer arm of one seed, with parameter snapshots."""
    if cfg.batch:
        traj = run_minibatch(
            loss,
            model,
            shared["tx"],
            shared["stream"],
            steps=cfg.opt_steps,
            learning_rate=strategies.schedule.rate(np.float64),
            key=jax.random.key(seed + 1),
            save_every=max(1, cfg.opt_steps // cfg.num_saves),
            save_params=True,
        )
    else:
        traj = FullBatchOptimizer(
            steps=cfg.opt_steps,
            num_saves=cfg.num_saves,
            optimizer=strategies.optimizer,
            schedule=strategies.schedule,
            clip=cfg.clip,
        ).run(loss, model)
    arm = {
        "optimizer": cfg.optimizer,
        "batch": cfg.batch,
        "schedule": cfg.schedule,
        "peak_lr": cfg.opt_lr,
        "warmup_steps": cfg.warmup_steps,
        "final_lr": cfg.final_lr,
        "weight_decay": getattr(strategies.optimizer, "weight_decay", 0.0),
        "clip": cfg.clip,
    }
    return dataclasses.replace(traj, info={**traj.info, **arm})
