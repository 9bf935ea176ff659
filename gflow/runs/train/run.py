"""A configured training run (``gflow train``), resumable.

The model is the paper's one-layer attention model or a ``gflow.Transformer`` of
any depth and width (``gflow.runs.names.MODELS``, the table ``gflow text`` draws
its models from too). Data are Markov sequences (``data="markov"``: the default
chain), in-context Markov chains, or a text file or folder (random windows of its
tokens). The run descends either

- fresh minibatches: the optimizer (SGD, momentum, Adam or AdamW, constant or
  warmup-cosine step size) on the shared clock t = Σ η_k, cut into ``segments``
  pieces, each checkpointed with the model and the optimizer state, so an
  interrupted run resumes bit for bit; or
- a fixed loss (the population loss of the chain, or ``windows`` sequences drawn
  once): full-batch GD, the gradient flow itself, or the optimizer on the full
  sample, the same method objects as ``gflow text``'s (``FullBatchGD``,
  ``IntegratedFlow``, ``FullBatchOptimizer``), saved as one piece.

Either way the loss and the per-head observables are recorded on a fixed held-out
sample.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import optax
from jaxtyping import Array

from gflow.analysis.head_observables import HeadObservables, probe_unigram_loss
from gflow.analysis.head_stages import HeadStage, detect_head_stages
from gflow.array_types import LossFn, Model
from gflow.dynamics.minibatch import minibatch_segment
from gflow.dynamics.optimizers import AbstractOptimizer
from gflow.dynamics.trajectory import Trajectory
from gflow.problems.losses import SequenceLoss, sequence_loss
from gflow.runs.checkpoint import STATUS, PieceStore, config_fingerprint, run_pieces
from gflow.runs.files import write_json
from gflow.runs.names import DATASETS
from gflow.runs.strategies import Strategies, train_strategies
from gflow.runs.train.config import TrainConfig
from gflow.runs.trajectory_files import (
    param_columns,
    params_from_columns,
    save_trajectory,
)
from gflow.text.corpus import load_corpus
from gflow.text.observables import observe_saves
from gflow.text.sources import AbstractSource
from gflow.text.strategies import AbstractFlowMethod
from gflow.text.subword import SubwordTokenizer
from gflow.text.tokenize import Vocabulary
from gflow.text.windows import WindowStream, fixed_sample


@dataclasses.dataclass(frozen=True)
class TrainData:
    """What a run trains and is evaluated on."""

    d_vocab: int
    stream: object  # key -> tokens [batch, seq_len + 1]
    eval_tokens: np.ndarray  # int32 [eval_batch, seq_len + 1]
    #: unigram and Bayes losses where known, and ``probe_unigram_loss``: the
    #: held-out sample's own unigram loss, the stage rules' gate reference
    references: dict
    vocab: Vocabulary | None = None
    tokenizer: SubwordTokenizer | None = None  # a trained subword tokeniser
    source: AbstractSource | None = None  # a named sequence data set
    #: what a run on a fixed loss descends (``TrainConfig.minibatches`` False):
    #: the population loss, or the loss of ``windows`` sequences drawn once
    fixed_loss: LossFn | None = None


def prepare(cfg: TrainConfig, strategies: Strategies | None = None) -> TrainData:
    """The minibatch stream and the held-out sample of ``cfg.data``, and the fixed
    loss of a run that descends one (``TrainConfig.minibatches`` False)."""
    key = jax.random.fold_in(jax.random.key(cfg.seed), 1)
    # the fixed sample's key: apart from the held-out sample and the minibatches
    fixed_key = jax.random.fold_in(jax.random.key(cfg.seed), 3)
    length = cfg.seq_len + 1
    # a run on a fixed loss draws its ``windows`` sequences once from the stream
    batch = cfg.batch if cfg.minibatches else cfg.windows
    if cfg.data in DATASETS:
        source = DATASETS.build(cfg.data, **dataclasses.asdict(cfg))
        sample = source.sample(key=key, batch=cfg.eval_batch, length=length)
        refs = source.references(length, key=jax.random.fold_in(key, 1))
        refs["probe_unigram_loss"] = float(probe_unigram_loss(sample, source.d_vocab))
        data = TrainData(
            source.d_vocab,
            source.stream(batch=batch, length=length),
            np.asarray(sample),
            refs,
            source=source,
        )
        if cfg.population:
            return dataclasses.replace(data, fixed_loss=source.population_loss())
    else:
        text = load_corpus(cfg.data, max_chars=cfg.max_chars)
        tokenization = (strategies or train_strategies(cfg)).tokenization
        toks, vocab, subword = tokenization.cut(text)
        ids = vocab.encode(toks)
        sample = fixed_sample(ids, length=cfg.seq_len, num=cfg.eval_batch)
        stream = WindowStream(ids, length=cfg.seq_len, batch=batch)
        freq = np.asarray(vocab.frequencies)
        unigram = float(-np.sum(freq[freq > 0] * np.log(freq[freq > 0])))
        refs = {
            "unigram_loss": unigram,
            "probe_unigram_loss": float(probe_unigram_loss(sample, len(vocab))),
        }
        data = TrainData(len(vocab), stream, sample, refs, vocab, subword)
    if cfg.minibatches:
        return data
    tokens = np.asarray(data.stream(fixed_key))  # ``windows`` sequences, once
    return dataclasses.replace(
        data, fixed_loss=SequenceLoss(tokens, d_vocab=data.d_vocab)
    )


def init_model(cfg: TrainConfig, d_vocab: int, strategies=None) -> Model:
    """The initial model (``cfg.model``: the attention model or a Transformer),
    drawn in one jitted program (compiled once per architecture: the key is
    traced, so the seeds of a sweep share it)."""
    model = (strategies or train_strategies(cfg)).model
    dtype = np.float64 if cfg.x64 else np.float32
    return model.init(d_vocab, jax.random.key(cfg.seed), dtype)


#: One optax transformation per method and schedule (``_transform``).
_TRANSFORMS: dict[tuple, optax.GradientTransformation] = {}


def _transform(cfg: TrainConfig, optimizer: AbstractOptimizer):
    """(step size, the transformation to run, the one whose ``init`` gives this
    run's optimizer state).

    The optimizers inject their hyperparameters into their state
    (``optax.inject_hyperparams``), whose ``update`` reads a constant step size
    from the state: the runs that differ in seed or constant step size run one
    shared transformation, so that the compiled segment (which holds the
    transformation's functions as static) is compiled once for a whole sweep. A
    schedule's peak is inside the schedule: one transformation per schedule.
    """
    lr = cfg.learning_rate()
    mine = optimizer.transform(lr)
    key = (optimizer, cfg.schedule)
    if callable(lr):  # a schedule, not a number the state holds
        key += (cfg.lr, cfg.warmup, cfg.total_steps)
    if len(_TRANSFORMS) >= 16:
        _TRANSFORMS.clear()
    return lr, _TRANSFORMS.setdefault(key, mine), mine


_FINAL, _OPT = "final:", "opt:"
#: A piece's columns that are not saved times: the last status, the divergence.
_SCALARS = (STATUS, "diverged_step", "stats")


def run_train(
    cfg: TrainConfig,
    data: TrainData,
    *,
    checkpoint_dir,
    progress=None,
    read_only: bool = False,
    strategies: Strategies | None = None,
) -> Trajectory:
    """Train as ``cfg`` says, resuming from the pieces found in ``checkpoint_dir``.

    On fresh minibatches (``cfg.minibatches``) the run is cut into
    ``cfg.segments`` pieces; a run that descends a fixed loss
    (``data.fixed_loss``: GD, the flow, or the optimizer on the full sample) is
    one piece, its observables taken from its parameter snapshots afterwards.

    ``progress(i, pieces, resumed)`` is called after each piece. ``read_only``: a
    run finished elsewhere, read back; FileNotFoundError if a piece is missing.
    ``strategies``: what the names of ``cfg`` stand for (default: built from them).
    """
    if cfg.x64 and not jax.config.jax_enable_x64:
        raise ValueError(
            "x64=True computes in float64, which JAX has off: call "
            "jax.config.update('jax_enable_x64', True) first (gflow sets no "
            "global flag; the command line does it for you)"
        )
    strategies = strategies or train_strategies(cfg)
    model = init_model(cfg, data.d_vocab, strategies)
    eval_loss = SequenceLoss(data.eval_tokens)
    obs = HeadObservables.default(data.eval_tokens[:64], data.d_vocab)
    if cfg.minibatches:
        fp = config_fingerprint(cfg, model, eval_loss, obs)
        compute = _minibatch_pieces(cfg, data, model, eval_loss, obs, strategies)
        count = cfg.segments
    else:
        fp = config_fingerprint(cfg, model, eval_loss, obs, data.fixed_loss)
        compute = _fixed_piece(data, model, eval_loss, obs, strategies.method)
        count = 1

    def checked(i, previous):
        if read_only:
            raise FileNotFoundError(f"{checkpoint_dir} has no segment {i}")
        return compute(i, previous)

    resumed_pieces = []

    def finished(i, columns, resumed):
        resumed_pieces.append(resumed)
        if progress is not None:
            progress(i, count, resumed)

    pieces = run_pieces(
        PieceStore(checkpoint_dir, "segment", fp), count, checked, finished=finished
    )
    last = dict(pieces[-1])
    final = params_from_columns(last, model, _FINAL)
    skip = (_FINAL, _OPT)
    names = [k for k in pieces[0] if k not in _SCALARS and not k.startswith(skip)]
    merged = {k: np.concatenate([p[k] for p in pieces]) for k in names}
    t = merged.pop("t")
    snaps = params_from_columns(merged, model)
    merged.update(_task_observables(data, snaps, len(t)))
    status = str(last[STATUS])
    if cfg.minibatches:
        stats = {
            "steps": cfg.piece_steps * len(pieces),
            "save_every": cfg.save_every,
            "segments": cfg.segments,
        }
    else:
        stats = json.loads(str(last["stats"]))
    stats["resumed_pieces"] = int(sum(resumed_pieces))
    bad = int(last["diverged_step"])
    if bad >= 0:
        stats["diverged_step"] = bad
    info = {"kind": "train", "optimizer": cfg.optimizer, "schedule": cfg.schedule}
    if not cfg.minibatches:
        info["method"] = cfg.method
    return Trajectory(
        t=t,
        metrics=merged,
        final=final,
        params=snaps,
        status=status,
        stats=stats,
        info=info,
    )


def _minibatch_pieces(cfg, data, model, eval_loss, obs, strategies):
    """``compute(i, previous)`` of a run on fresh minibatches: segment i of the
    optimizer's loop, from the model and optimizer state piece i − 1 ended with."""
    lr, optimizer, own = _transform(cfg, strategies.optimizer)
    key = jax.random.fold_in(jax.random.key(cfg.seed), 2)
    params, _ = eqx.partition(model, eqx.is_inexact_array)
    state0 = own.init(params)

    def compute(i, previous):
        start = i * cfg.piece_steps
        current, state, t0 = model, state0, 0.0
        if previous is not None:
            current = params_from_columns(dict(previous), model, _FINAL)
            state = params_from_columns(dict(previous), state0, _OPT, eqx.is_array)
            t0 = float(previous["t"][-1])
        traj, state = minibatch_segment(
            eval_loss,
            current,
            optimizer,
            data.stream,
            batch_loss=sequence_loss,
            key=key,
            steps=cfg.piece_steps,
            save_every=cfg.save_every,
            learning_rate=lr,
            start=start,
            t0=t0,
            opt_state=state,
            observables=obs,
            save_params=True,
        )
        columns = {"t": traj.t, **traj.metrics, **param_columns(traj.params)}
        if i:  # the first save of a piece is the last of the one before
            columns = {k: v[1:] for k, v in columns.items()}
        columns.update(param_columns(traj.final, _FINAL))
        columns.update(param_columns(state, _OPT, eqx.is_array))
        columns["diverged_step"] = np.asarray(traj.stats.get("diverged_step", -1))
        columns[STATUS] = np.asarray(traj.status)
        return columns

    return compute


class HeldOut(eqx.Module):
    """The held-out loss and the head observables of a model, as one callable
    (its arrays traced: one compiled evaluation for every run of a shape)."""

    loss: SequenceLoss
    observables: HeadObservables

    def __call__(self, model) -> dict[str, Array]:
        return {"loss": self.loss(model), **self.observables(model)}


def _fixed_piece(data, model, eval_loss, obs, method: AbstractFlowMethod):
    """``compute(0, None)`` of a run on a fixed loss: the whole run of ``method``
    (GD, the flow or the full-batch optimizer) on ``data.fixed_loss``, its
    descended loss kept as ``train_loss`` and ``loss`` the held-out one, as on
    minibatches, with the head observables, each from the saved parameters (NaN
    after a divergence)."""

    held_out = HeldOut(eval_loss, obs)

    def compute(i, previous):
        traj = method.run(data.fixed_loss, model)
        metrics = {k: v for k, v in traj.metrics.items() if k != "loss"}
        metrics["train_loss"] = traj.metrics["loss"]
        metrics.update(observe_saves(held_out, traj))
        columns = {"t": np.asarray(traj.t), **metrics, **param_columns(traj.params)}
        columns.update(param_columns(traj.final, _FINAL))
        stats = {k: v for k, v in traj.stats.items() if k != "diverged_step"}
        columns["stats"] = np.asarray(json.dumps(stats, default=float))
        columns["diverged_step"] = np.asarray(traj.stats.get("diverged_step", -1))
        columns[STATUS] = np.asarray(traj.status)
        return columns

    return compute


def _task_observables(data: TrainData, snaps, n: int) -> dict[str, np.ndarray]:
    """The source's own measures (``AbstractSource.observe``) of each saved model
    on the held-out sample, e.g. ICL-MC's KL distance to each strategy."""
    if data.source is None:
        return {}
    tokens = data.eval_tokens[:64]
    rows = [
        data.source.observe(jax.tree.map(lambda x, i=i: x[i], snaps), tokens)
        for i in range(n)
    ]
    return {k: np.array([r[k] for r in rows]) for k in (rows[0] if rows else {})}


def write_train_run(
    run_dir,
    traj: Trajectory,
    *,
    name: str = "train",
    stages_file="stages.json",
    unigram_loss: float | None = None,
) -> list[HeadStage]:
    """The trajectory files ``<name>*`` and ``stages_file`` (per-head stages; None:
    not written); the stages found. With ``unigram_loss`` the stage rules read the
    held-out ``loss`` minus it as ``unigram_gap`` (their information gate,
    docs/stage_rules.md): the held-out sample's own unigram loss
    (``probe_unigram_loss``), as the monitor reads it; the files keep the
    trajectory as it is."""
    run_dir = Path(run_dir)
    save_trajectory(run_dir, traj, name=name)
    seen = traj
    if unigram_loss is not None and "loss" in traj.metrics:
        gap = np.asarray(traj.metrics["loss"], float) - float(unigram_loss)
        seen = dataclasses.replace(traj, metrics={**traj.metrics, "unigram_gap": gap})
    stages = detect_head_stages(seen)
    if stages_file is not None:
        write_json(run_dir / stages_file, [s.to_dict() for s in stages])
    return stages
