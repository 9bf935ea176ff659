"""The configuration of ``gflow train``: one run (``TrainConfig``), the members of
a sweep over seeds and step sizes (``TrainSweep``), and both as the command's
configuration (``TrainRun``), which config.json holds as ``"config"`` and
``"sweep"``."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import ClassVar

from gflow.dynamics.schedules import Constant
from gflow.runs.config import (
    AbstractConfig,
    ConfigError,
    at_least,
    bad,
    non_negative,
    positive,
    setting,
)
from gflow.runs.names import (
    DATASETS,
    FULL_BATCH_OPTIMIZERS,
    MODELS,
    OPTIMIZERS,
    SCHEDULES,
    SOLVERS,
    TOKENIZERS,
    TRAINING,
    check_model_run,
)
from gflow.text.corpus import PACKAGED_CORPORA
from gflow.text.subword import WHITESPACE_MODES

#: Settings added after runs were saved, at the defaults those runs computed with:
#: left out of a run's fingerprint while at their defaults, so that its pieces
#: still resume.
LATER_SETTINGS = {
    "tokenizer": "word",
    "whitespace": "isolated",
    "states": 3,
    "alpha": 1.0,
    "model": "transformer",
    "method": "optimizer",
    "windows": 256,
    "population": False,
    "solver": "auto",
    "rtol": 1e-6,
    "atol": 1e-8,
    "max_steps": 1_000_000,
}


@dataclasses.dataclass(frozen=True)
class TrainConfig(AbstractConfig):
    """Everything that defines a training run; validates itself."""

    data: str = setting(
        "markov",
        "'markov' (the paper's chain, --pi, --lam), 'icl-markov' (in-context Markov "
        "chains: each sequence its own transition matrix, --states, --alpha), a "
        "text file or folder, or 'tinystories-excerpt' (text shipped with gflow)",
    )
    pi: tuple[float, ...] = setting(
        (0.75, 0.19, 0.05, 0.01), "markov: the chain's stationary distribution π"
    )
    lam: float = setting(
        0.5, "markov: repeat probability λ (0: i.i.d. tokens from π, a control)"
    )
    states: int = setting(3, "icl-markov: states k (the vocabulary)")
    alpha: float = setting(
        1.0, "icl-markov: Dirichlet concentration α of each transition row"
    )
    vocab_size: int = setting(
        64, "vocabulary of a text corpus (kept types, or a subword tokeniser's pieces)"
    )
    tokenizer: str = setting(
        "word",
        f"a text corpus's tokeniser: one of {', '.join(TOKENIZERS)} (bpe and "
        "unigram are trained on the corpus, offline; needs pip install "
        "'gflow[text]'; saved as tokenizer.json)",
    )
    whitespace: str = setting(
        "isolated",
        f"subword spaces: one of {', '.join(WHITESPACE_MODES)} (the piece ▁ on its "
        "own, or glued to the next word as GPT-2 and SentencePiece do)",
    )
    max_chars: int | None = setting(
        200_000, "a text corpus: read its first characters only, this many"
    )
    model: str = setting(
        "transformer",
        f"one of {', '.join(MODELS)}: the paper's one-layer AttentionModel (with "
        "--max-len: learned positions; one layer, one head, no value, MLP, "
        "LayerNorm or residual) or gflow.Transformer of any depth and width",
    )
    layers: int = setting(2, "number of layers L")
    heads: int = setting(2, "attention heads per layer H")
    d_model: int = setting(16, "width m (a multiple of --heads)")
    d_ff: int | None = setting(
        None, "hidden width of a GeLU MLP per layer (default none)"
    )
    value: bool = setting(False, "a value and an output matrix per head")
    layernorm: bool = setting(
        False, "pre-LayerNorm before attention, MLP and unembedding"
    )
    residual: bool = setting(False, "residual streams")
    max_len: int | None = setting(
        None, "learned positions up to this length (default none)"
    )
    init_scale: float = setting(0.02, "std of the initial weights")
    method: str = setting(
        "optimizer",
        f"one of {', '.join(TRAINING)}: --optimizer on fresh minibatches (or on the "
        "fixed sample of --windows sequences with --batch 0), full-batch GD of step "
        "--lr on that sample, or the gradient flow on it to t = steps·lr (float64)",
    )
    windows: int = setting(
        256,
        "the fixed training sample of --method gd, flow and --batch 0: this many "
        "sequences (a text corpus: random windows of it)",
    )
    population: bool = setting(
        False,
        "--data markov, --model attention: descend the exact population loss "
        "instead of a fixed sample (--method gd, flow or --batch 0)",
    )
    solver: str = setting(
        "auto",
        f"the flow's solver (--method flow): one of {', '.join(SOLVERS)}",
    )
    rtol: float = setting(1e-6, "the flow's relative tolerance")
    atol: float = setting(1e-8, "the flow's absolute tolerance")
    max_steps: int = setting(
        1_000_000,
        "the flow's step budget: a flow that reaches it ends with status max_steps "
        "where it got to (a stiff flow: try another --solver)",
    )
    optimizer: str = setting("adamw", f"one of {', '.join(OPTIMIZERS)}")
    lr: float = setting(0.003, "peak step size η")
    schedule: str = setting("constant", f"one of {', '.join(SCHEDULES)}")
    warmup: float = setting(0.1, "warmup fraction of the steps (warmup-cosine)")
    beta: float = setting(0.9, "momentum β / Adam β₁")
    weight_decay: float = setting(0.01, "AdamW's decoupled weight decay")
    steps: int = setting(300, "optimizer steps")
    batch: int = setting(
        32,
        "sequences per minibatch; 0: the optimizer descends the fixed sample "
        "(--windows) or the population, full batch (sgd, adam, adamw)",
    )
    seq_len: int = setting(64, "context length s")
    eval_batch: int = setting(128, "held-out sequences the metrics use")
    num_saves: int = setting(31, "saved times")
    segments: int = setting(5, "checkpointed pieces of the run")
    seed: int = setting(0, "PRNG seed of weights, batches and the held-out sample")
    x64: bool = setting(False, "float64 (default float32)", flag="--float64")

    hashed_defaults: ClassVar[dict] = LATER_SETTINGS

    @classmethod
    def complete(cls, settings: dict) -> None:
        """A float64-only method (the flow) computes in float64 whatever ``x64``
        says; a model that takes no layers or heads (the attention model) has
        one of each unless told otherwise (then it is refused)."""
        method, model = settings.get("method"), settings.get("model")
        if method in TRAINING and TRAINING[method].float64:
            settings["x64"] = True
        if model in MODELS and "layers" not in MODELS[model].parts:
            settings.setdefault("layers", 1)
            settings.setdefault("heads", 1)

    def check(self):
        check_model_run(self, TRAINING)
        for name in ("layers", "heads", "d_model", "seq_len", "eval_batch"):
            at_least(name, getattr(self, name), 1)
        at_least("batch", self.batch, 0)
        at_least("windows", self.windows, 1)
        if self.d_model % self.heads:
            bad("d_model", f"must be a multiple of heads = {self.heads}")
        for name in ("d_ff", "max_len", "max_chars"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                bad(name, f"must be >= 1 or None, got {getattr(self, name)}")
        if self.max_len is not None and self.max_len < self.seq_len:
            bad("max_len", f"must be >= seq_len = {self.seq_len}, got {self.max_len}")
        OPTIMIZERS.check("optimizer", self.optimizer)
        for name in ("lr", "init_scale"):
            positive(name, getattr(self, name))
        if not 0 <= self.beta < 1:
            bad("beta", f"must lie in [0, 1), got {self.beta}")
        non_negative("weight_decay", self.weight_decay)
        at_least("steps", self.steps, 1)
        at_least("num_saves", self.num_saves, 2)
        at_least("segments", self.segments, 1)
        at_least("vocab_size", self.vocab_size, 2)
        at_least("states", self.states, 2)
        positive("alpha", self.alpha)
        if self.data in DATASETS:
            source = DATASETS.build(self.data, **dataclasses.asdict(self))
            try:
                source.check()
            except ValueError as e:
                bad(source.settings, str(e))
        elif not self.data.strip() or not (
            Path(self.data).exists() or self.data in PACKAGED_CORPORA
        ):
            bad(
                "data",
                f"{self.data!r} is neither one of {', '.join(DATASETS)}, a text "
                f"file or folder, nor the text shipped with gflow "
                f"({', '.join(PACKAGED_CORPORA)})",
            )
        self._check_method()
        self._check_model()

    @property
    def minibatches(self) -> bool:
        """Whether the run descends fresh minibatches (else a fixed loss: the
        sample of ``windows`` sequences, or the population)."""
        return TRAINING[self.method].optimizer_run and self.batch > 0

    @property
    def label(self) -> str:
        """What descends, as the command's summary names it: the optimizer (on
        the full sample with batch 0), GD or the flow."""
        if not TRAINING[self.method].optimizer_run:
            return self.method
        return self.optimizer if self.batch else f"{self.optimizer} (full batch)"

    def _check_method(self) -> None:
        for name in ("rtol", "atol"):
            positive(name, getattr(self, name))
        at_least("max_steps", self.max_steps, 1)
        method = TRAINING[self.method]
        if self.minibatches and self.segments > self.steps:
            bad("segments", f"must lie in [1, steps], got {self.segments}")
        scheduled = not isinstance(self.step_schedule(), Constant)
        if not method.optimizer_run and scheduled:
            bad(
                "schedule",
                f"--method {self.method} takes a constant step (its clock is "
                "t = steps·lr); a scheduled full-batch run is --method optimizer "
                "--batch 0",
            )
        if method.optimizer_run and not self.minibatches:
            if self.optimizer not in FULL_BATCH_OPTIMIZERS:
                bad(
                    "optimizer",
                    f"{self.optimizer} has no full-batch loop; with --batch 0 use "
                    f"one of {', '.join(FULL_BATCH_OPTIMIZERS)}",
                )

    def _check_model(self) -> None:
        settings = dataclasses.asdict(self)
        refused = MODELS[self.model].refused_parts(**settings)
        if refused:
            bad(
                "model",
                f"the {self.model} model has one layer, one head and no value, "
                f"MLP, LayerNorm or residual stream; drop {', '.join(refused)} "
                "(--layers 1 --heads 1) or use --model transformer",
            )
        if self.population:
            if self.minibatches:
                bad(
                    "population",
                    "the population loss is descended whole: give --method gd or "
                    "flow, or --batch 0",
                )
            try:
                if self.data not in DATASETS:
                    raise ValueError("a text corpus")
                DATASETS.build(self.data, **settings).population_loss()
            except ValueError:
                bad(
                    "population",
                    f"{self.data!r} has no exact population loss here; the "
                    "paper's chain has (--data markov)",
                )
            if not MODELS.build(self.model, **settings).has_population_loss:
                bad(
                    "population",
                    "the exact population loss is the attention model's: "
                    "--model attention, without positions",
                )

    @property
    def save_every(self) -> int:
        """Steps between saves: the run saves about ``num_saves`` times."""
        return max(1, self.steps // (self.num_saves - 1))

    @property
    def piece_steps(self) -> int:
        """Steps per checkpointed piece, a multiple of ``save_every``."""
        per = math.ceil(self.steps / self.segments)
        return self.save_every * math.ceil(per / self.save_every)

    @property
    def total_steps(self) -> int:
        """``steps`` rounded up to whole pieces."""
        return self.piece_steps * self.segments

    def step_schedule(self):
        """The schedule object over the run (``gflow.dynamics.schedules``); a
        warmup lasts at least one step."""
        return SCHEDULES.build(
            self.schedule,
            self.lr,
            steps=self.total_steps,
            warmup_steps=max(1, round(self.warmup * self.total_steps)),
        )

    def learning_rate(self):
        """The step size optax takes: a number, or the warmup-cosine schedule."""
        return self.step_schedule().rate()


@dataclasses.dataclass(frozen=True)
class TrainSweep(AbstractConfig):
    """The members of a training sweep; validates itself.

    Attributes:
        seeds: K: the seeds ``seed`` .. ``seed`` + K − 1 of the base configuration.
        lrs: the peak step sizes, or None for the base configuration's ``lr``.
    """

    seeds: int = setting(
        1,
        "train seeds --seed .. --seed + K - 1, one member each, named train_s<seed>; "
        "stage times as mean ± sd in stages_summary.json",
    )
    lrs: tuple[float, ...] | None = setting(
        None,
        "train one member per peak step size (comma-separated; instead of --lr), "
        "named train_lr<η>",
    )

    def check(self):
        at_least("seeds", self.seeds, 1)
        if self.lrs is not None:
            if not self.lrs:
                bad("lrs", "give at least one step size")
            for lr in self.lrs:
                if not (lr > 0 and math.isfinite(lr)):
                    bad("lrs", f"every step size must be > 0 and finite, got {lr}")
            if len(set(self.lrs)) < len(self.lrs):
                bad("lrs", f"a step size is repeated in {list(self.lrs)}")

    @property
    def is_sweep(self) -> bool:
        """Whether this is a sweep (else the plain layout of one run)."""
        return self.seeds > 1 or self.lrs is not None

    def members(self, cfg: TrainConfig) -> list[tuple[str, TrainConfig]]:
        """(name, configuration) of each member of the sweep around ``cfg``."""
        if cfg.seed + self.seeds > 2**32:
            bad(
                "seeds",
                f"seed + seeds - 1 = {cfg.seed + self.seeds - 1} must be < 2**32; "
                "give a smaller --seed or --seeds",
            )
        out = []
        for lr in self.lrs or (cfg.lr,):
            for seed in range(cfg.seed, cfg.seed + self.seeds):
                name = "train"
                name += f"_lr{lr!r}" if self.lrs is not None else ""
                name += f"_s{seed}" if self.seeds > 1 else ""
                out.append((name, dataclasses.replace(cfg, lr=lr, seed=seed)))
        return out


@dataclasses.dataclass(frozen=True)
class TrainRun(AbstractConfig):
    """``gflow train``'s configuration: the base run and its members.

    config.json keeps them apart, as before: ``"config"`` holds ``base`` and
    ``"sweep"`` the members (absent for one run written by an earlier gflow).
    """

    base: TrainConfig = setting(TrainConfig(), nested=("*",))
    sweep: TrainSweep = setting(TrainSweep(), nested=("*",))
    sections: ClassVar[tuple[tuple[str, str], ...]] = (
        ("config", "base"),
        ("sweep", "sweep"),
    )

    def check(self):
        self.sweep.members(self.base)  # seeds within range

    @classmethod
    def check_given(cls, given) -> None:
        if {"base.lr", "sweep.lrs"} <= set(given):
            raise ConfigError("--lr and --lrs: give one step size or a list, not both")
