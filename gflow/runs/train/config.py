"""The configuration of ``gflow train``: one run (``TrainConfig``), the members of
a sweep over seeds and step sizes (``TrainSweep``), and both as the command's
configuration (``TrainRun``), which config.json holds as ``"config"`` and
``"sweep"``."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from gflow.runs.config import (
    AbstractConfig,
    ConfigError,
    at_least,
    bad,
    check_seed,
    positive,
    setting,
)
from gflow.runs.names import DATASETS, OPTIMIZERS, SCHEDULES
from gflow.text.subword import KINDS as SUBWORD_KINDS
from gflow.text.subword import WHITESPACE_MODES
from gflow.text.tokenize import TOKENIZERS

#: Every tokeniser a text corpus can be cut with: the fixed ones and the subword
#: kinds trained on the corpus.
TOKENIZER_NAMES = (*TOKENIZERS, *SUBWORD_KINDS)

#: Settings added after runs were saved, at the defaults those runs computed with:
#: left out of a run's fingerprint while at their defaults, so that its pieces
#: still resume.
LATER_SETTINGS = {
    "tokenizer": "word",
    "whitespace": "isolated",
    "states": 3,
    "alpha": 1.0,
}


@dataclasses.dataclass(frozen=True)
class TrainConfig(AbstractConfig):
    """Everything that defines a training run; validates itself."""

    data: str = setting(
        "markov",
        "'markov' (the paper's chain, --pi, --lam), 'icl-markov' (in-context Markov "
        "chains: each sequence its own transition matrix, --states, --alpha) or a "
        "text file or folder",
    )
    pi: tuple[float, ...] = setting((0.75, 0.19, 0.05, 0.01))
    lam: float = setting(0.5)
    states: int = setting(3, "icl-markov: states k (the vocabulary)")
    alpha: float = setting(
        1.0, "icl-markov: Dirichlet concentration α of each transition row"
    )
    vocab_size: int = setting(
        64, "vocabulary of a text corpus (kept types, or a subword tokeniser's pieces)"
    )
    tokenizer: str = setting(
        "word",
        f"a text corpus's tokeniser: one of {', '.join(TOKENIZER_NAMES)} (bpe and "
        "unigram are trained on the corpus, offline; needs pip install "
        "'gflow[text]'; saved as tokenizer.json)",
    )
    whitespace: str = setting(
        "isolated",
        f"subword spaces: one of {', '.join(WHITESPACE_MODES)} (the piece ▁ on its "
        "own, or glued to the next word as GPT-2 and SentencePiece do)",
    )
    max_chars: int | None = setting(200_000)
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
    optimizer: str = setting("adamw", f"one of {', '.join(OPTIMIZERS)}")
    lr: float = setting(0.003, "peak step size η")
    schedule: str = setting("constant", f"one of {', '.join(SCHEDULES)}")
    warmup: float = setting(0.1, "warmup fraction of the steps (warmup-cosine)")
    beta: float = setting(0.9, "momentum β / Adam β₁")
    weight_decay: float = setting(0.01, "AdamW's decoupled weight decay")
    steps: int = setting(300, "optimizer steps")
    batch: int = setting(32, "sequences per minibatch")
    seq_len: int = setting(64, "context length s")
    eval_batch: int = setting(128, "held-out sequences the metrics use")
    num_saves: int = setting(31, "saved times")
    segments: int = setting(5, "checkpointed pieces of the run")
    seed: int = setting(0, "PRNG seed of weights, batches and the held-out sample")
    x64: bool = setting(False, "float64 (default float32)", flag="--float64")

    def check(self):
        for name in ("layers", "heads", "d_model", "batch", "seq_len", "eval_batch"):
            at_least(name, getattr(self, name), 1)
        if self.d_model % self.heads:
            bad("d_model", f"must be a multiple of heads = {self.heads}")
        for name in ("d_ff", "max_len", "max_chars"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                bad(name, f"must be >= 1 or None, got {getattr(self, name)}")
        if self.max_len is not None and self.max_len < self.seq_len:
            bad("max_len", f"must be >= seq_len = {self.seq_len}, got {self.max_len}")
        OPTIMIZERS.check("optimizer", self.optimizer)
        SCHEDULES.check("schedule", self.schedule)
        for name in ("lr", "init_scale"):
            positive(name, getattr(self, name))
        if not 0 <= self.warmup < 1:
            bad("warmup", f"must lie in [0, 1), got {self.warmup}")
        if not 0 <= self.beta < 1:
            bad("beta", f"must lie in [0, 1), got {self.beta}")
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            bad("weight_decay", f"must be >= 0 and finite, got {self.weight_decay}")
        at_least("steps", self.steps, 1)
        at_least("num_saves", self.num_saves, 2)
        if not 1 <= self.segments <= self.steps:
            bad("segments", f"must lie in [1, steps], got {self.segments}")
        at_least("vocab_size", self.vocab_size, 2)
        if self.tokenizer not in TOKENIZER_NAMES:
            bad("tokenizer", f"must be one of {', '.join(TOKENIZER_NAMES)}")
        if self.whitespace not in WHITESPACE_MODES:
            bad("whitespace", f"must be one of {', '.join(WHITESPACE_MODES)}")
        if self.tokenizer in SUBWORD_KINDS and not 32 <= self.vocab_size <= 100_000:
            bad(
                "vocab_size",
                f"a subword vocabulary needs 32-100000 pieces, got {self.vocab_size}",
            )
        check_seed(self.seed)
        at_least("states", self.states, 2)
        positive("alpha", self.alpha)
        if self.data in DATASETS:
            source = DATASETS.build(self.data, **dataclasses.asdict(self))
            try:
                source.check()
            except ValueError as e:
                bad(source.settings, str(e))
        elif not self.data.strip() or not Path(self.data).exists():
            bad(
                "data",
                f"{self.data!r} is neither one of {', '.join(DATASETS)} nor a text "
                "file or folder",
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

    def to_dict(self) -> dict:
        lrs = None if self.lrs is None else list(self.lrs)
        return {"seeds": self.seeds, "lrs": lrs}


@dataclasses.dataclass(frozen=True)
class TrainRun(AbstractConfig):
    """``gflow train``'s configuration: the base run and its members.

    config.json keeps them apart, as before: ``"config"`` holds ``base`` and
    ``"sweep"`` the members (absent for one run written by an earlier gflow).
    """

    base: TrainConfig = setting(TrainConfig(), nested=("*",))
    sweep: TrainSweep = setting(TrainSweep(), nested=("*",))

    def check(self):
        self.sweep.members(self.base)  # seeds within range

    @classmethod
    def check_given(cls, given) -> None:
        if {"base.lr", "sweep.lrs"} <= set(given):
            raise ConfigError("--lr and --lrs: give one step size or a list, not both")

    def to_document(self) -> dict:
        return {"config": self.base.to_json(), "sweep": self.sweep.to_dict()}

    @classmethod
    def document_settings(cls, doc: dict):
        return {"base": doc.get("config"), "sweep": doc.get("sweep") or {}}
