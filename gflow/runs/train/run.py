"""A configured training run of a deep Transformer (``gflow train``), resumable.

Data are Markov sequences (``data="markov"``: the default chain, fresh minibatches
every step) or a text file or folder (random windows of its tokens). The optimizer
(SGD, momentum, Adam or AdamW, constant or warmup-cosine step size) runs on fresh
minibatches on the shared clock t = Σ η_k; the loss and the per-head observables are
recorded on a fixed held-out sample. The run is cut into ``segments`` pieces, each
checkpointed by the driver of ``gflow.runs.checkpoint`` with the model and the
optimizer state, so an interrupted run resumes bit for bit.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import optax

from gflow.analysis.head_observables import HeadObservables
from gflow.analysis.head_stages import HeadStage, detect_head_stages
from gflow.dynamics.minibatch import minibatch_segment
from gflow.dynamics.trajectory import Trajectory
from gflow.problems.losses import SequenceLoss, sequence_loss
from gflow.problems.transformer import Transformer
from gflow.runs.checkpoint import STATUS, PieceStore, fingerprint, run_pieces
from gflow.runs.files import write_json
from gflow.runs.names import DATASETS, OPTIMIZERS, TOKENIZERS
from gflow.runs.sources import AbstractSource
from gflow.runs.train.config import LATER_SETTINGS, TrainConfig
from gflow.runs.trajectory_files import (
    param_columns,
    params_from_columns,
    save_trajectory,
)
from gflow.text.corpus import load_corpus
from gflow.text.subword import SubwordTokenizer
from gflow.text.tokenize import Vocabulary
from gflow.text.windows import WindowStream, fixed_sample


@dataclasses.dataclass(frozen=True)
class TrainData:
    """What a run trains and is evaluated on."""

    d_vocab: int
    stream: object  # key -> tokens [batch, seq_len + 1]
    eval_tokens: np.ndarray  # int32 [eval_batch, seq_len + 1]
    references: dict  # unigram and Bayes losses where known
    vocab: Vocabulary | None = None
    tokenizer: SubwordTokenizer | None = None  # a trained subword tokeniser
    source: AbstractSource | None = None  # a named sequence data set


def prepare(cfg: TrainConfig) -> TrainData:
    """The minibatch stream and the held-out sample of ``cfg.data``."""
    key = jax.random.fold_in(jax.random.key(cfg.seed), 1)
    length = cfg.seq_len + 1
    if cfg.data in DATASETS:
        source = DATASETS.build(cfg.data, **dataclasses.asdict(cfg))
        sample = source.sample(key=key, batch=cfg.eval_batch, length=length)
        refs = source.references(length, key=jax.random.fold_in(key, 1))
        stream = source.stream(batch=cfg.batch, length=length)
        return TrainData(
            source.d_vocab, stream, np.asarray(sample), refs, source=source
        )
    text = load_corpus(cfg.data, max_chars=cfg.max_chars)
    tokenization = TOKENIZERS.build(cfg.tokenizer, **dataclasses.asdict(cfg))
    toks, vocab, subword = tokenization.cut(text)
    ids = vocab.encode(toks)
    sample = fixed_sample(ids, length=cfg.seq_len, num=cfg.eval_batch)
    stream = WindowStream(ids, length=cfg.seq_len, batch=cfg.batch)
    freq = np.asarray(vocab.frequencies)
    unigram = float(-np.sum(freq[freq > 0] * np.log(freq[freq > 0])))
    refs = {"unigram_loss": unigram}
    return TrainData(len(vocab), stream, sample, refs, vocab, subword)


def init_model(cfg: TrainConfig, d_vocab: int) -> Transformer:
    """The initial Transformer, drawn in one jitted program (compiled once per
    architecture: the key is traced, so the seeds of a sweep share it)."""
    shape = (
        cfg.d_model,
        cfg.layers,
        cfg.heads,
        cfg.init_scale,
        cfg.d_ff,
        cfg.value,
        cfg.layernorm,
        cfg.residual,
        cfg.max_len,
        cfg.x64,
    )
    return _initializer(d_vocab, *shape)(jax.random.key(cfg.seed))


@functools.lru_cache(maxsize=8)
def _initializer(
    d_vocab,
    d_model,
    layers,
    heads,
    scale,
    d_ff,
    value,
    layernorm,
    residual,
    max_len,
    x64,
):
    return eqx.filter_jit(
        lambda key: Transformer.init(
            d_vocab=d_vocab,
            d_model=d_model,
            n_layers=layers,
            n_heads=heads,
            key=key,
            init_scale=scale,
            d_ff=d_ff,
            value=value,
            layernorm=layernorm,
            residual=residual,
            max_len=max_len,
            dtype=np.float64 if x64 else np.float32,
        )
    )


#: One optax transformation per method and schedule (``_transform``).
_TRANSFORMS: dict[tuple, optax.GradientTransformation] = {}


def _transform(cfg: TrainConfig):
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
    optimizer = OPTIMIZERS.build(
        cfg.optimizer, beta=cfg.beta, weight_decay=cfg.weight_decay
    )
    mine = optimizer.transform(lr)
    key = (optimizer, cfg.schedule)
    if callable(lr):  # a schedule, not a number the state holds
        key += (cfg.lr, cfg.warmup, cfg.total_steps)
    if len(_TRANSFORMS) >= 16:
        _TRANSFORMS.clear()
    return lr, _TRANSFORMS.setdefault(key, mine), mine


_FINAL, _OPT = "final:", "opt:"


def run_train(
    cfg: TrainConfig,
    data: TrainData,
    *,
    checkpoint_dir,
    progress=None,
    read_only: bool = False,
) -> Trajectory:
    """Train as ``cfg`` says, resuming from the pieces found in ``checkpoint_dir``.

    ``progress(i, pieces, resumed)`` is called after each piece. ``read_only``: a
    run finished elsewhere, read back; FileNotFoundError if a piece is missing.
    """
    model = init_model(cfg, data.d_vocab)
    lr, optimizer, own = _transform(cfg)
    eval_loss = SequenceLoss(data.eval_tokens)
    obs = HeadObservables.default(data.eval_tokens[:64], data.d_vocab)
    key = jax.random.fold_in(jax.random.key(cfg.seed), 2)
    params, _ = eqx.partition(model, eqx.is_inexact_array)
    state0 = own.init(params)
    settings = {
        k: v
        for k, v in dataclasses.asdict(cfg).items()
        if k not in LATER_SETTINGS or v != LATER_SETTINGS[k]
    }
    fp = fingerprint(model, eval_loss, obs, settings=settings)

    def compute(i, previous):
        if read_only:
            raise FileNotFoundError(f"{checkpoint_dir} has no segment {i}")
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

    resumed_pieces = []

    def finished(i, columns, resumed):
        resumed_pieces.append(resumed)
        if progress is not None:
            progress(i, cfg.segments, resumed)

    pieces = run_pieces(
        PieceStore(checkpoint_dir, "segment", fp),
        cfg.segments,
        compute,
        finished=finished,
    )
    last = dict(pieces[-1])
    final = params_from_columns(last, model, _FINAL)
    skip = (_FINAL, _OPT)
    names = [k for k in pieces[0] if k not in (STATUS, "diverged_step")]
    names = [k for k in names if not k.startswith(skip)]
    merged = {k: np.concatenate([p[k] for p in pieces]) for k in names}
    t = merged.pop("t")
    snaps = params_from_columns(merged, model)
    merged.update(_task_observables(data, snaps, len(t)))
    status = str(last[STATUS])
    stats = {
        "steps": cfg.piece_steps * len(pieces),
        "save_every": cfg.save_every,
        "segments": cfg.segments,
        "resumed_pieces": int(sum(resumed_pieces)),
    }
    bad = int(last["diverged_step"])
    if bad >= 0:
        stats["diverged_step"] = bad
    return Trajectory(
        t=t,
        metrics=merged,
        final=final,
        params=snaps,
        status=status,
        stats=stats,
        info={"kind": "train", "optimizer": cfg.optimizer, "schedule": cfg.schedule},
    )


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
    run_dir, traj: Trajectory, *, name: str = "train", stages_file="stages.json"
) -> list[HeadStage]:
    """The trajectory files ``<name>*`` and ``stages_file`` (per-head stages; None:
    not written); the stages found."""
    run_dir = Path(run_dir)
    save_trajectory(run_dir, traj, name=name)
    stages = detect_head_stages(traj)
    if stages_file is not None:
        write_json(run_dir / stages_file, [s.to_dict() for s in stages])
    return stages
