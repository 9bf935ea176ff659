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
"""

from __future__ import annotations

import dataclasses
import functools
import time
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import optax

from gflow.analysis.head_observables import HeadObservables
from gflow.dynamics.flow import solve_flow
from gflow.dynamics.optimizers import SGD, Adam, AdamW
from gflow.dynamics.schedules import warmup_cosine
from gflow.dynamics.trajectory import Trajectory
from gflow.problems.model import AttentionModel
from gflow.problems.transformer import Transformer
from gflow.runs.flow_run import SOLVERS
from gflow.runs.text.config import PAPER_QUERIES, TextConfig
from gflow.text.corpus import load_corpus
from gflow.text.fullbatch import run_full_batch
from gflow.text.observables import TextObservables, default_queries, observe_snapshots
from gflow.text.positional import PositionalAttentionModel, TextLoss
from gflow.text.stability import stability_check
from gflow.text.subword import KINDS, SubwordTokenizer
from gflow.text.tokenize import TOKENIZERS, Vocabulary
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


def prepare(cfg: TextConfig) -> TextData:
    """Load, tokenise, build the vocabulary, cut the fixed sample, pick queries."""
    text = load_corpus(cfg.corpus, max_chars=cfg.max_chars, download=cfg.download)
    subword = None
    if cfg.tokenizer in KINDS:
        subword = _subword(cfg, text)
        toks = subword(text)
        vocab = Vocabulary.build(toks, subword.vocab_size)  # every piece is kept
    else:
        toks = TOKENIZERS[cfg.tokenizer](text)
        vocab = Vocabulary.build(toks, cfg.vocab_size)
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


def _subword(cfg: TextConfig, text: str) -> SubwordTokenizer:
    """The subword tokeniser: read from ``tokenizer_file`` (a run directory's
    tokenizer.json, so a run reuses its pieces), else trained on the corpus."""
    if cfg.tokenizer_file is None:
        return SubwordTokenizer.train(
            text,
            kind=cfg.tokenizer,
            vocab_size=cfg.vocab_size,
            whitespace=cfg.whitespace,
        )
    try:
        tok = SubwordTokenizer.from_json(Path(cfg.tokenizer_file).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"tokenizer_file: {cfg.tokenizer_file}: {e}") from None
    if tok.kind != cfg.tokenizer:
        raise ValueError(
            f"tokenizer_file: {cfg.tokenizer_file} holds a {tok.kind} tokeniser, "
            f"not {cfg.tokenizer}"
        )
    return tok


def init_model(cfg: TextConfig, d: int, seed: int | None = None):
    """The initial model of ``seed`` (default ``cfg.seed``). The draw runs as one
    jitted program (eagerly each of its random normals would be compiled on its own,
    seconds each when busy), compiled once per model shape: the key is traced."""
    shape = (cfg.model, cfg.layers, cfg.heads, cfg.positional, cfg.context)
    init = _initializer(*shape, d, cfg.d_model, cfg.init_scale, cfg.x64)
    return init(jax.random.key(cfg.seed if seed is None else seed))


@functools.lru_cache(maxsize=8)
def _initializer(model, layers, heads, positional, context, d, d_model, scale, x64):
    dtype = np.float64 if x64 else np.float32
    kwargs = dict(d_vocab=d, d_model=d_model, init_scale=scale)
    if model == "transformer":  # no values, MLP or LayerNorm: the one-layer model's
        init = functools.partial(
            Transformer.init,
            n_layers=layers,
            n_heads=heads,
            max_len=context if positional else None,
            **kwargs,
        )
    elif positional:
        init = functools.partial(
            PositionalAttentionModel.init, context_length=context, **kwargs
        )
    else:
        init = functools.partial(AttentionModel.init, **kwargs)
    return eqx.filter_jit(lambda key: init(key=key, dtype=dtype))


def step_size(cfg: TextConfig, dtype=np.float32):
    """The optimizer arm's step size: ``opt_lr``, or its warmup-cosine schedule
    k -> η_k over ``opt_steps`` (``warmup_cosine``; a function of traced k)."""
    if cfg.schedule == "constant":
        return cfg.opt_lr
    return functools.partial(
        warmup_cosine,
        peak=np.asarray(cfg.opt_lr, dtype),
        warmup=cfg.warmup_steps,
        total=cfg.opt_steps,
        final=np.asarray(cfg.final_lr, dtype),
    )


def arm_transform(cfg: TextConfig, dtype=np.float32):
    """The optax transformation of a minibatch optimizer arm at ``step_size``:
    ``optax.sgd`` (gd, sgd), ``optax.adam`` or ``optax.adamw`` (β₁ = 0.9, decay
    ``weight_decay``), after ``optax.clip_by_global_norm`` when ``clip`` > 0. Plain
    optax, as a hand-written loop would call it (``optimizer_named``'s injected
    hyperparameters round differently in float32)."""
    lr = step_size(cfg, dtype)
    tx = {
        "gd": lambda: optax.sgd(lr),
        "sgd": lambda: optax.sgd(lr),
        "adam": lambda: optax.adam(lr),
        "adamw": lambda: optax.adamw(lr, weight_decay=cfg.weight_decay),
    }[cfg.optimizer]()
    if cfg.clip > 0:
        tx = optax.chain(optax.clip_by_global_norm(cfg.clip), tx)
    return tx


def _observed(traj: Trajectory, obs, heads, loop_s: float) -> Trajectory:
    """``traj`` with the text observables and the head observables (``head_*``, for
    the stage rules) computed from its parameter snapshots (NaN after a divergence,
    like its other metrics); the snapshots are dropped. Records the loop's and the
    observables' wall time (compilation included)."""
    start = time.perf_counter()
    extra = {} if obs is None else observe_snapshots(obs, traj.params)
    for k, v in observe_snapshots(heads, traj.params).items():
        if k.startswith("head_") or k == "sv_W_A" or obs is None:
            extra[HEAD_METRICS.get(k, k)] = v
    bad = ~np.isfinite(traj.metrics["loss"])
    for k, v in extra.items():
        v = v.astype(np.result_type(v.dtype, np.float32))
        v[bad] = np.nan
        extra[k] = v
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


def run_text(
    cfg: TextConfig,
    data: TextData,
    pieces=None,
    report=None,
    *,
    seeds=None,
    read_only: bool = False,
) -> dict[str, Trajectory]:
    """Every seed's deterministic run (``cfg.method``) and optimizer arm, each pair
    from one init; names as ``cfg.run_names``.

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
    """
    d = len(data.vocab)
    loss = TextLoss(data.sample, d_vocab=d, all_positions=cfg.all_positions)
    obs = None  # a Transformer's observables are the per-head ones only
    if cfg.model == "attention":
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
        shared["tx"] = arm_transform(cfg, dtype)
    runs = {}
    for seed in cfg.seed_list if seeds is None else seeds:
        model = init_model(cfg, d, seed)
        for name, arm in zip(cfg.run_names(seed), (_reference, _arm)):
            traj = None if pieces is None else pieces.load(name, model)
            resumed = traj is not None
            if not resumed and read_only:
                raise FileNotFoundError(f"run {name} (seed {seed}) was not saved")
            if not resumed:
                start = time.perf_counter()
                traj = arm(cfg, seed, model, loss, shared)
                loop_s = time.perf_counter() - start
                if arm is _reference and cfg.method == "gd":
                    traj = _checked(cfg, loss, traj, seed)  # timed apart
                traj = _observed(traj, obs, heads, loop_s)
                traj = dataclasses.replace(traj, info={**traj.info, "seed": seed})
                if pieces is not None:
                    pieces.save(name, traj)
            runs[name] = traj
            if report is not None:
                report(name, traj, resumed)
    return runs


def _reference(cfg: TextConfig, seed: int, model, loss, shared) -> Trajectory:
    """The deterministic run of one seed: full-batch GD of step ``lr`` or the Tsit5
    flow to ``steps``·``lr``, with parameter snapshots."""
    if cfg.method == "gd":
        return run_full_batch(
            loss,
            model,
            optimizer=SGD(),
            learning_rate=cfg.lr,
            steps=cfg.steps,
            num_saves=cfg.num_saves,
        )
    t1 = cfg.steps * cfg.lr
    return solve_flow(
        loss,
        model,
        t1=t1,
        ts=np.linspace(0.0, t1, cfg.num_saves + 1),
        solver=SOLVERS[cfg.solver](),
        rtol=cfg.rtol,
        atol=cfg.atol,
        save_params=True,
        progress=False,
    )


def _arm(cfg: TextConfig, seed: int, model, loss, shared) -> Trajectory:
    """The optimizer arm of one seed, with parameter snapshots."""
    if cfg.batch:
        traj = run_minibatch(
            loss,
            model,
            shared["tx"],
            shared["stream"],
            steps=cfg.opt_steps,
            learning_rate=step_size(cfg, np.float64),
            key=jax.random.key(seed + 1),
            save_every=max(1, cfg.opt_steps // cfg.num_saves),
            save_params=True,
        )
    else:
        optimizer = {
            "gd": SGD(),
            "adam": Adam(),
            "adamw": AdamW(weight_decay=cfg.weight_decay),
        }[cfg.optimizer]
        traj = run_full_batch(
            loss,
            model,
            optimizer=optimizer,
            learning_rate=cfg.opt_lr,
            steps=cfg.opt_steps,
            num_saves=cfg.num_saves,
            schedule=cfg.schedule,
            warmup=cfg.warmup_steps,
            final_lr=cfg.final_lr,
            clip=cfg.clip,
        )
    arm = {
        "optimizer": cfg.optimizer,
        "batch": cfg.batch,
        "schedule": cfg.schedule,
        "peak_lr": cfg.opt_lr,
        "warmup_steps": cfg.warmup_steps,
        "final_lr": cfg.final_lr,
        "weight_decay": cfg.weight_decay if cfg.optimizer == "adamw" else 0.0,
        "clip": cfg.clip,
    }
    return dataclasses.replace(traj, info={**traj.info, **arm})


def _checked(cfg: TextConfig, loss, ref: Trajectory, seed: int) -> Trajectory:
    """The GD reference run with λ_max at ``cfg.sharpness_checks`` of its saves and
    its stability ratio η·λ_max/2 (``stability_check``) in ``info["stability"]``,
    the check's wall time in ``stats["sharpness_s"]``."""
    if not cfg.sharpness_checks:
        return ref
    start = time.perf_counter()
    check = stability_check(loss, ref, cfg.lr, checks=cfg.sharpness_checks, seed=seed)
    return dataclasses.replace(
        ref,
        info={**ref.info, "stability": check},
        stats={**ref.stats, "sharpness_s": time.perf_counter() - start},
    )
