"""A configured text run (``gflow text``): data, model, the flow or small-step GD, and
Adam from the same init, saved as a run directory."""

from __future__ import annotations

import dataclasses
import functools
import io as _io
import math
import time
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import optax

from gflow.dynamics.flow import solve_flow
from gflow.dynamics.optimizers import SGD, Adam
from gflow.dynamics.trajectory import Trajectory
from gflow.problems.model import AttentionModel
from gflow.runs.environment import check_seed
from gflow.runs.files import atomic_write_bytes, write_json
from gflow.runs.trajectory_files import save_trajectory
from gflow.text.corpus import load_corpus
from gflow.text.fullbatch import run_full_batch
from gflow.text.observables import TextObservables, default_queries, observe_snapshots
from gflow.text.positional import PositionalAttentionModel, TextLoss
from gflow.text.subword import KINDS, WHITESPACE, WHITESPACE_MODES, SubwordTokenizer
from gflow.text.tokenize import TOKENIZERS, Vocabulary
from gflow.text.train import run_minibatch
from gflow.text.windows import WindowStream, fixed_sample

#: How the deterministic run follows the flow.
METHODS = ("gd", "flow")
#: Every tokeniser name: the fixed ones and the subword kinds trained on the corpus.
TOKENIZER_NAMES = (*TOKENIZERS, *KINDS)
#: Query tokens tracked by default where the vocabulary has them: the whitespace
#: piece and the rows of the paper's figures (WikiText: "continue"; TinyStories:
#: "the", ",", "a", "full", "been").
PAPER_QUERIES = (WHITESPACE, "continue", "the", ",", "a", "full", "been")


@dataclasses.dataclass(frozen=True)
class TextConfig:
    """Everything that defines a text run; validates itself.

    ``method="gd"`` follows the flow with full-batch gradient descent of step ``lr``
    (its clock t_k = k·lr is the flow time); ``"flow"`` integrates it with Tsit5.
    Adam runs ``adam_steps`` steps of ``adam_lr`` from the same init, full batch
    (``adam_batch=0``) or on minibatches of random windows.
    """

    corpus: str = ""
    vocab_size: int = 200
    tokenizer: str = "word"
    whitespace: str = "isolated"
    tokenizer_file: str | None = None
    max_chars: int | None = None
    download: bool = False
    context: int = 32
    windows: int = 512
    d_model: int = 32
    init_scale: float = 1e-3
    seed: int = 0
    method: str = "gd"
    lr: float = 0.25
    steps: int = 4000
    rtol: float = 1e-5
    atol: float = 1e-7
    adam_lr: float = 2e-3
    adam_steps: int = 1000
    adam_batch: int = 0
    all_positions: bool = False
    positional: bool = False
    track: tuple[str, ...] = ()
    num_queries: int = 4
    topk: int = 5
    num_saves: int = 100
    x64: bool = False

    def __post_init__(self):
        def bad(field, why):
            raise ValueError(f"{field}: {why}")

        if not self.corpus:
            bad("corpus", "give a text file, a folder or a hub name")
        if self.tokenizer not in TOKENIZER_NAMES:
            bad("tokenizer", f"must be one of {', '.join(TOKENIZER_NAMES)}")
        if self.whitespace not in WHITESPACE_MODES:
            bad("whitespace", f"must be one of {', '.join(WHITESPACE_MODES)}")
        if self.tokenizer in KINDS and not 32 <= self.vocab_size <= 100_000:
            bad("vocab_size", f"a subword vocabulary needs 32-100000 pieces, got "
                f"{self.vocab_size}")  # fmt: skip
        if self.tokenizer_file is not None:
            if self.tokenizer not in KINDS:
                bad("tokenizer_file", "only for --tokenizer bpe or unigram")
            if not Path(self.tokenizer_file).is_file():
                bad("tokenizer_file", f"{self.tokenizer_file!r} is not a file")
        if self.method not in METHODS:
            bad("method", f"must be one of {METHODS}, got {self.method!r}")
        for name in ("vocab_size", "context", "windows", "d_model", "steps"):
            if getattr(self, name) < 1:
                bad(name, f"must be a positive integer, got {getattr(self, name)}")
        for name in ("adam_steps", "adam_batch", "num_queries"):
            if getattr(self, name) < 0:
                bad(name, f"must be >= 0, got {getattr(self, name)}")
        for name in ("init_scale", "lr", "adam_lr", "rtol", "atol"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                bad(name, f"must be > 0 and finite, got {value}")
        if self.topk < 1:
            bad("topk", f"must be a positive integer, got {self.topk}")
        if self.max_chars is not None and self.max_chars < 1:
            bad("max_chars", f"must be a positive integer, got {self.max_chars}")
        check_seed(self.seed)
        if self.num_saves < 2:
            bad("num_saves", f"must be >= 2, got {self.num_saves}")
        if self.method == "flow" and not self.x64:
            bad("x64", "the flow needs float64 (tolerances near float32 epsilon)")


@dataclasses.dataclass(frozen=True)
class TextData:
    """The tokenised corpus and what a run derives from it."""

    vocab: Vocabulary
    ids: np.ndarray  # int32 [n_tokens]
    sample: np.ndarray  # int32 [windows, context + 1]
    queries: tuple[int, ...]
    top: tuple[int, ...]
    tokenizer: SubwordTokenizer | None = None


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
    return TextData(vocab, ids, sample, queries, top, subword)


def _subword(cfg: TextConfig, text: str) -> SubwordTokenizer:
    """The subword tokeniser: read from ``tokenizer_file`` (a run directory's
    tokenizer.json, so a run reuses its pieces), else trained on the corpus."""
    if cfg.tokenizer_file is None:
        return SubwordTokenizer.train(
            text, kind=cfg.tokenizer, vocab_size=cfg.vocab_size,
            whitespace=cfg.whitespace,
        )  # fmt: skip
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


def init_model(cfg: TextConfig, d: int):
    """The run's initial model. The draw runs as one jitted program: eagerly each
    of its random normals would be compiled on its own (seconds each when busy)."""
    dtype = np.float64 if cfg.x64 else np.float32
    kwargs = dict(d_vocab=d, d_model=cfg.d_model, init_scale=cfg.init_scale)
    if cfg.positional:
        init = functools.partial(
            PositionalAttentionModel.init, context_length=cfg.context, **kwargs
        )
    else:
        init = functools.partial(AttentionModel.init, **kwargs)
    return eqx.filter_jit(lambda key: init(key=key, dtype=dtype))(
        jax.random.key(cfg.seed)
    )


def _observed(traj: Trajectory, obs, loop_s: float) -> Trajectory:
    """``traj`` with the text observables computed from its parameter snapshots
    (NaN after a divergence, like its other metrics); the snapshots are dropped.
    Records the loop's and the observables' wall time (compilation included)."""
    start = time.perf_counter()
    extra = observe_snapshots(obs, traj.params)
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


def run_text(cfg: TextConfig, data: TextData) -> dict[str, Trajectory]:
    """The deterministic run (``cfg.method``) and Adam, from the same init.

    The loops save parameter snapshots only; the text observables are computed from
    them afterwards (``observe_snapshots``), so the compiled loops hold nothing but
    the loss gradient. Full-batch GD and Adam share one compiled loop
    (``run_full_batch``: method, step size and steps are traced).
    """
    model = init_model(cfg, len(data.vocab))
    d = len(data.vocab)
    loss = TextLoss(data.sample, d_vocab=d, all_positions=cfg.all_positions)
    obs = TextObservables(data.sample, list(data.queries), list(data.top), d_vocab=d)
    runs = {}
    start = time.perf_counter()
    if cfg.method == "gd":
        runs["gd"] = run_full_batch(
            loss,
            model,
            optimizer=SGD(),
            learning_rate=cfg.lr,
            steps=cfg.steps,
            num_saves=cfg.num_saves,
        )
    else:
        t1 = cfg.steps * cfg.lr
        runs["flow"] = solve_flow(
            loss,
            model,
            t1=t1,
            ts=np.linspace(0.0, t1, cfg.num_saves + 1),
            rtol=cfg.rtol,
            atol=cfg.atol,
            save_params=True,
            progress=False,
        )
    runs[cfg.method] = _observed(runs[cfg.method], obs, time.perf_counter() - start)
    if cfg.adam_steps:
        start = time.perf_counter()
        if cfg.adam_batch:
            stream = WindowStream(data.ids, length=cfg.context, batch=cfg.adam_batch)
            traj = run_minibatch(
                loss,
                model,
                optax.adam(cfg.adam_lr),
                stream,
                steps=cfg.adam_steps,
                learning_rate=cfg.adam_lr,
                key=jax.random.key(cfg.seed + 1),
                save_every=max(1, cfg.adam_steps // cfg.num_saves),
                save_params=True,
            )
        else:
            traj = run_full_batch(
                loss,
                model,
                optimizer=Adam(),
                learning_rate=cfg.adam_lr,
                steps=cfg.adam_steps,
                num_saves=cfg.num_saves,
            )
        runs["adam"] = _observed(traj, obs, time.perf_counter() - start)
    return runs


def _stages(traj: Trajectory):
    """gflow.detect_stages on a run, where its Markov observables apply."""
    from gflow.analysis.stages import detect_stages

    try:
        return {
            "available": True,
            "stages": [s.to_dict() for s in detect_stages(traj)],
        }
    except Exception as e:  # its inputs may not fit a text run: record why
        return {"available": False, "why": f"{type(e).__name__}: {e}"}


def write_text_run(out, cfg: TextConfig, data: TextData, runs) -> Path:
    """config.json, vocab.json, one trajectory per run (attention rows apart, in
    ``<run>_rows.npz``), stages.json; figures are drawn from these files."""
    out = Path(out)
    vocab = data.vocab
    write_json(
        out / "config.json",
        {
            "config": dataclasses.asdict(cfg),
            "d_vocab": len(vocab),
            "n_tokens": int(data.ids.shape[0]),
            "unk_frequency": float(vocab.frequencies[vocab.unk_id]),
            "queries": {vocab.tokens[q]: q for q in data.queries},
            "top": [vocab.tokens[i] for i in data.top],
        },
    )
    write_json(out / "vocab.json", vocab.frequency_table())
    if data.tokenizer is not None:  # the trained pieces, to reuse
        atomic_write_bytes(out / "tokenizer.json", data.tokenizer.to_json().encode())
    stages = {}
    for name, traj in runs.items():
        metrics = dict(traj.metrics)
        rows = metrics.pop("attention_rows")
        final = traj.final
        if isinstance(final, PositionalAttentionModel):
            buf = _io.BytesIO()
            np.save(buf, np.asarray(final.W_pos))
            atomic_write_bytes(out / f"{name}_W_pos.npy", buf.getvalue())
            final = final.base
        saved = dataclasses.replace(traj, metrics=metrics, final=final, params=None)
        save_trajectory(out, saved, name=name)
        buf = _io.BytesIO()
        np.savez(buf, t=traj.t, rows=rows, queries=np.asarray(data.queries))
        atomic_write_bytes(out / f"{name}_rows.npz", buf.getvalue())
        stages[name] = _stages(saved)
    write_json(out / "stages.json", stages)
    return out
