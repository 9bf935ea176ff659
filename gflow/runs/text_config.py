"""The configuration of a text run (``gflow text``): every setting, validated, and
the name tables the command line offers."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from gflow.runs.config import check_seed
from gflow.runs.flow_run import SOLVERS
from gflow.text.fullbatch import SCHEDULES
from gflow.text.subword import KINDS, WHITESPACE, WHITESPACE_MODES
from gflow.text.tokenize import TOKENIZERS

#: How the deterministic run follows the flow.
METHODS = ("gd", "flow")
#: The optimizer arm's update rules: gd and sgd are both x <- x - η_k g (gd on the
#: fixed sample, sgd on fresh minibatches), adam and adamw as in optax.
OPTIMIZER_NAMES = ("gd", "sgd", "adam", "adamw")
#: The text model: the one-layer ``AttentionModel`` (or ``PositionalAttentionModel``
#: with ``positional``) or the deep ``gflow.Transformer`` (``layers``, ``heads``).
MODELS = ("attention", "transformer")
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
    (its clock t_k = k·lr is the flow time); ``"flow"`` integrates it to
    ``steps``·``lr`` with ``solver`` (a ``gflow flow`` solver name: Tsit5 by
    default; ``rkc2`` or ``stiff`` where the loss is stiff) at ``rtol``, ``atol``.

    The optimizer arm runs ``opt_steps`` steps (0: none) of ``optimizer`` from the
    same init: full batch on the fixed sample (``batch=0``; gd, adam, adamw) or on
    ``batch`` fresh random windows each step (sgd, adam, adamw). Its step size is
    ``opt_lr``, constant or (``schedule="warmup-cosine"``) rising linearly from 0 over
    the first ⌊``warmup``·``opt_steps``⌋ steps to ``opt_lr`` and falling as a cosine
    to ``final_lr`` at the last step. ``clip`` > 0 clips each gradient to that global
    norm first; ``weight_decay`` is AdamW's decoupled decay (adamw only). The
    defaults are Adam at a constant 2e-3 on the full batch.

    ``seeds`` = K runs seeds ``seed`` .. ``seed`` + K − 1, each its own init (and
    minibatches).

    ``model="transformer"`` trains a ``gflow.Transformer`` of ``layers`` layers of
    ``heads`` heads (no values, MLP or LayerNorm; learned positions with
    ``positional``) instead of the one-layer model; its observables are the per-head
    ones (``HeadObservables``).

    The tracked queries' rows are measured on the fixed sample and on up to
    ``row_windows`` more windows ending at each of them (spread over the corpus), so
    that a rare query's row is not an average over a handful of windows or none.

    ``sharpness_checks`` = k measures λ_max of the loss Hessian at k of the GD
    reference run's saves (``gflow.text.stability``; 0: off) and reports η·λ_max/2.
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
    model: str = "attention"
    layers: int = 1
    heads: int = 1
    init_scale: float = 1e-3
    seed: int = 0
    method: str = "gd"
    lr: float = 0.25
    steps: int = 4000
    rtol: float = 1e-5
    atol: float = 1e-7
    solver: str = "tsit5"
    optimizer: str = "adam"
    opt_lr: float = 2e-3
    opt_steps: int = 1000
    batch: int = 0
    schedule: str = "constant"
    warmup: float = 0.1
    final_lr: float = 0.0
    weight_decay: float = 0.01
    clip: float = 0.0
    seeds: int = 1
    all_positions: bool = False
    positional: bool = False
    track: tuple[str, ...] = ()
    num_queries: int = 4
    row_windows: int = 32
    topk: int = 5
    num_saves: int = 100
    sharpness_checks: int = 6
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
        if self.solver not in SOLVERS:
            bad("solver", f"unknown {self.solver!r}; choose one of "
                f"{', '.join(SOLVERS)}")  # fmt: skip
        if self.model not in MODELS:
            bad("model", f"must be one of {', '.join(MODELS)}, got {self.model!r}")
        for name in ("vocab_size", "context", "windows", "d_model", "steps",
                     "layers", "heads"):  # fmt: skip
            if getattr(self, name) < 1:
                bad(name, f"must be a positive integer, got {getattr(self, name)}")
        for name in ("opt_steps", "batch", "num_queries", "sharpness_checks",
                     "row_windows"):  # fmt: skip
            if getattr(self, name) < 0:
                bad(name, f"must be >= 0, got {getattr(self, name)}")
        for name in ("init_scale", "lr", "opt_lr", "rtol", "atol"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                bad(name, f"must be > 0 and finite, got {value}")
        for name in ("final_lr", "weight_decay", "clip"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                bad(name, f"must be >= 0 and finite, got {value}")
        if self.optimizer not in OPTIMIZER_NAMES:
            bad("optimizer", f"unknown {self.optimizer!r}; choose one of "
                f"{', '.join(OPTIMIZER_NAMES)}")  # fmt: skip
        if self.schedule not in SCHEDULES:
            bad("schedule", f"unknown {self.schedule!r}; choose one of "
                f"{', '.join(SCHEDULES)}")  # fmt: skip
        if not 0 <= self.warmup < 1:
            bad("warmup", f"must lie in [0, 1), got {self.warmup}")
        if self.optimizer == "gd" and self.batch:
            bad("optimizer", "gd runs on the fixed sample (batch 0); sgd is the same "
                "update on fresh minibatches")  # fmt: skip
        if self.optimizer == "sgd" and not self.batch:
            bad("optimizer", "sgd runs on fresh minibatches: give a batch > 0 (gd is "
                "the same update on the fixed sample)")  # fmt: skip
        if self.model == "transformer" and self.d_model % self.heads:
            bad("heads", f"must divide d_model = {self.d_model}, got {self.heads}")
        if self.model == "attention" and (self.layers, self.heads) != (1, 1):
            bad("model", "the attention model has one layer and one head: layers and "
                "heads > 1 need --model transformer")  # fmt: skip
        if self.seeds < 1:
            bad("seeds", f"must be a positive integer, got {self.seeds}")
        if self.topk < 1:
            bad("topk", f"must be a positive integer, got {self.topk}")
        if self.max_chars is not None and self.max_chars < 1:
            bad("max_chars", f"must be a positive integer, got {self.max_chars}")
        check_seed(self.seed)
        if self.seed + self.seeds > 2**32:
            bad("seeds", f"seed + seeds - 1 = {self.seed + self.seeds - 1} must be "
                "below 2**32")  # fmt: skip
        if self.num_saves < 2:
            bad("num_saves", f"must be >= 2, got {self.num_saves}")
        if self.method == "flow" and not self.x64:
            bad("x64", "the flow needs float64 (tolerances near float32 epsilon)")

    @property
    def seed_list(self) -> tuple[int, ...]:
        """The seeds run: ``seed`` .. ``seed`` + ``seeds`` − 1."""
        return tuple(range(self.seed, self.seed + self.seeds))

    @property
    def warmup_steps(self) -> int:
        """The optimizer arm's warmup: ⌊``warmup``·``opt_steps``⌋ steps."""
        return math.floor(self.warmup * self.opt_steps)

    @property
    def arm_name(self) -> str:
        """The optimizer arm's run name: the optimizer's ("adam" by default), or
        "gd_opt" beside the reference run "gd"."""
        return "gd_opt" if self.optimizer == self.method else self.optimizer

    @property
    def base_names(self) -> tuple[str, ...]:
        """The reference run's name and, if it runs, the optimizer arm's."""
        return (self.method, self.arm_name)[: 2 if self.opt_steps else 1]

    def run_names(self, seed: int) -> tuple[str, ...]:
        """The names of one seed's runs in the run directory: ``base_names``,
        suffixed ``_s<seed>`` when several seeds run."""
        names = self.base_names
        return names if self.seeds == 1 else tuple(f"{n}_s{seed}" for n in names)
