"""The configuration of a text run (``gflow text``): every setting, validated, and
the name tables the command line offers."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import ClassVar

from gflow.runs.config import (
    AbstractConfig,
    at_least,
    bad,
    non_negative,
    positive,
    setting,
)
from gflow.runs.names import METHODS as _METHODS
from gflow.runs.names import MODELS as _MODELS
from gflow.runs.names import SCHEDULES, SOLVERS, check_model_run
from gflow.runs.names import TOKENIZERS as _TOKENIZERS
from gflow.text.subword import KINDS, WHITESPACE, WHITESPACE_MODES

#: How the deterministic run follows the flow.
METHODS = tuple(_METHODS)
#: The optimizer arm's update rules: gd and sgd are both x <- x - η_k g (gd on the
#: fixed sample, sgd on fresh minibatches), adam and adamw as in optax.
OPTIMIZER_NAMES = ("gd", "sgd", "adam", "adamw")
#: The text model: the one-layer ``AttentionModel`` (or ``PositionalAttentionModel``
#: with ``positional``) or the deep ``gflow.Transformer`` (``layers``, ``heads``).
MODELS = tuple(_MODELS)
#: Every tokeniser name: the fixed ones and the subword kinds trained on the corpus.
TOKENIZER_NAMES = tuple(_TOKENIZERS)
#: Query tokens tracked by default where the vocabulary has them: the whitespace
#: piece and the rows of the paper's figures (WikiText: "continue"; TinyStories:
#: "the", ",", "a", "full", "been").
PAPER_QUERIES = (WHITESPACE, "continue", "the", ",", "a", "full", "been")


@dataclasses.dataclass(frozen=True)
class TextConfig(AbstractConfig):
    """Everything that defines a text run; validates itself.

    ``method="gd"`` follows the flow with full-batch gradient descent of step ``lr``
    (its clock t_k = k·lr is the flow time); ``"flow"`` integrates it to
    ``steps``·``lr`` with ``solver`` (a ``gflow flow`` solver name: by default the
    stiffness-aware ``auto``, Tsit5 steps until the flow is stiff) at ``rtol``,
    ``atol``.

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
    ``heads`` heads (by default no value, MLP, LayerNorm or residual stream, each
    switched on by ``value``, ``d_ff``, ``layernorm``, ``residual``; learned
    positions with ``positional``) instead of the one-layer model, drawn from the
    model table ``gflow train`` uses; its observables are the per-head ones
    (``HeadObservables``).

    The tracked queries' rows are measured on the fixed sample and on up to
    ``row_windows`` more windows ending at each of them (spread over the corpus), so
    that a rare query's row is not an average over a handful of windows or none.

    ``sharpness_checks`` = k measures λ_max of the loss Hessian at k of the GD
    reference run's saves (``gflow.text.stability``; 0: off) and reports η·λ_max/2.
    """

    corpus: str = setting(
        "",
        "a text file or folder, 'tinystories-excerpt' (text shipped with gflow), or "
        "'wikitext' / 'tinystories' with --download (required unless --resume)",
    )
    vocab_size: int = setting(
        200, "V: kept types (word, byte), or the pieces a subword tokeniser trains"
    )
    tokenizer: str = setting(
        "word",
        f"one of {', '.join(TOKENIZER_NAMES)}; bpe and unigram are trained on the "
        "corpus (offline; needs pip install 'gflow[text]') and saved as "
        "tokenizer.json",
    )
    whitespace: str = setting(
        "isolated",
        f"subword spaces: one of {', '.join(WHITESPACE_MODES)} (the piece ▁ on its "
        "own, or glued to the next word as in SentencePiece)",
    )
    tokenizer_file: str | None = setting(
        None,
        "reuse a trained subword tokeniser (an earlier run's tokenizer.json) instead "
        "of training one",
    )
    max_chars: int | None = setting(None, "use the start only")
    download: bool = setting(
        False,
        "allow fetching a hub corpus (needs pip install gflow[hf] and network)",
    )
    context: int = setting(32, "window length s")
    windows: int = setting(512, "fixed sample size")
    d_model: int = setting(32, "width m")
    model: str = setting(
        "attention",
        f"one of {', '.join(MODELS)}: the one-layer attention model, or the deep "
        "gflow.Transformer (--layers, --heads; per-head observables, no row figures)",
    )
    layers: int = setting(1, "transformer depth")
    heads: int = setting(1, "transformer heads per layer")
    d_ff: int | None = setting(
        None, "transformer: hidden width of a GeLU MLP per layer (default none)"
    )
    value: bool = setting(False, "transformer: a value and an output matrix per head")
    layernorm: bool = setting(
        False, "transformer: pre-LayerNorm before attention, MLP and unembedding"
    )
    residual: bool = setting(False, "transformer: residual streams")
    init_scale: float = setting(1e-3, "std of the initial weights")
    seed: int = setting(0, "PRNG seed of the first run")
    method: str = setting(
        "gd",
        f"one of {', '.join(METHODS)}: full-batch GD of step --lr (default; cheap "
        "and close to the flow at small steps) or the flow (float64)",
    )
    lr: float = setting(0.25, "GD step (flow: t1/steps)")
    steps: int = setting(4000, "GD steps")
    rtol: float = setting(1e-5, "the flow's relative tolerance")
    atol: float = setting(1e-7, "the flow's absolute tolerance")
    solver: str = setting(
        "auto",
        f"the flow's solver (--method flow): one of {', '.join(SOLVERS)}; the "
        "default auto takes Tsit5 steps until the flow is stiff, then the cheaper "
        "of EXPRB32 and RKC2",
    )
    optimizer: str = setting(
        "adam",
        f"the second run: one of {', '.join(OPTIMIZER_NAMES)}; gd on the fixed "
        "sample (--batch 0), sgd the same update on fresh minibatches (--batch > 0), "
        "adam and adamw either way",
    )
    opt_lr: float = setting(
        2e-3, "its step size (a schedule's peak)", aliases=("--adam-lr",)
    )
    opt_steps: int = setting(
        1000, "its steps; 0: no second run", aliases=("--adam-steps",)
    )
    batch: int = setting(
        0,
        "0: the fixed sample (full batch); else this many fresh random windows each "
        "step",
        aliases=("--adam-batch",),
    )
    schedule: str = setting(
        "constant",
        f"one of {', '.join(SCHEDULES)}: warmup-cosine rises linearly from 0 to "
        "--opt-lr over the --warmup fraction of the steps, then falls as a cosine to "
        "--final-lr",
    )
    warmup: float = setting(
        0.1, "warmup fraction of the steps, in [0, 1) (warmup-cosine)"
    )
    final_lr: float = setting(
        0.0,
        "the step size the cosine falls to at the end of the run (warmup-cosine)",
    )
    weight_decay: float = setting(0.01, "AdamW's decoupled weight decay (adamw only)")
    clip: float = setting(0.0, "clip each gradient to this global norm (0: off)")
    seeds: int = setting(
        1,
        "run seeds --seed .. --seed + K - 1 (init and batches), compiled once; runs "
        "named <run>_s<seed>, stage times as mean ± sd in stages_summary.json",
    )
    all_positions: bool = setting(False, "causal loss at every position")
    positional: bool = setting(False, "learned positional encoding")
    track: tuple[str, ...] = setting(
        (),
        "comma-separated query tokens to track (besides the automatic ones)",
    )
    num_queries: int = setting(4, "automatic tracked queries")
    row_windows: int = setting(
        32,
        "a tracked row is measured on the fixed sample and this many more windows "
        "ending at its query, spread over the corpus (0: the sample only)",
    )
    topk: int = setting(5, "keys named per tracked row")
    num_saves: int = setting(100, "saved times per run")
    sharpness_checks: int = setting(
        6,
        "GD: λ_max of the loss Hessian (Lanczos) at this many saves, reported as "
        "η·λ_max/2 with a warning above 1/2 (not a flow proxy there); 0: off",
    )
    x64: bool = setting(False, "float64 (flow: always)", flag="--float64")

    #: Settings that do not change what a run computes.
    not_results: ClassVar[tuple[str, ...]] = ("tokenizer_file", "download")

    @classmethod
    def complete(cls, settings: dict) -> None:
        """A float64-only method (the flow) computes in float64 whatever ``x64``
        says."""
        method = settings.get("method")
        if method in _METHODS and _METHODS[method].float64:
            settings["x64"] = True

    def check(self):
        if not self.corpus:
            bad(
                "corpus",
                "give --corpus (a text file or folder, or a hub name), or --resume "
                "RUN_DIR",
            )
        check_model_run(self, _METHODS)
        if self.tokenizer_file is not None:
            if self.tokenizer not in KINDS:
                bad("tokenizer_file", "only for --tokenizer bpe or unigram")
            if not Path(self.tokenizer_file).is_file():
                bad("tokenizer_file", f"{self.tokenizer_file!r} is not a file")
        for name in ("vocab_size", "context", "windows", "d_model", "steps"):
            at_least(name, getattr(self, name), 1)
        for name in ("layers", "heads", "seeds", "topk"):
            at_least(name, getattr(self, name), 1)
        for name in ("opt_steps", "batch", "num_queries", "sharpness_checks"):
            at_least(name, getattr(self, name), 0)
        at_least("row_windows", self.row_windows, 0)
        at_least("num_saves", self.num_saves, 2)
        for name in ("d_ff", "max_chars"):
            if getattr(self, name) is not None:
                at_least(name, getattr(self, name), 1)
        for name in ("init_scale", "lr", "opt_lr", "rtol", "atol"):
            positive(name, getattr(self, name))
        for name in ("final_lr", "weight_decay", "clip"):
            non_negative(name, getattr(self, name))
        if self.optimizer not in OPTIMIZER_NAMES:
            bad(
                "optimizer",
                f"unknown {self.optimizer!r}; choose one of "
                f"{', '.join(OPTIMIZER_NAMES)}",
            )
        if self.optimizer == "gd" and self.batch:
            bad(
                "optimizer",
                "gd runs on the fixed sample (batch 0); sgd is the same "
                "update on fresh minibatches",
            )
        if self.optimizer == "sgd" and not self.batch:
            bad(
                "optimizer",
                "sgd runs on fresh minibatches: give a batch > 0 (gd is "
                "the same update on the fixed sample)",
            )
        model = _MODELS[self.model]
        if "heads" in model.parts and self.d_model % self.heads:
            bad("heads", f"must divide d_model = {self.d_model}, got {self.heads}")
        if model.refused_parts(layers=self.layers, heads=self.heads):
            bad(
                "model",
                "the attention model has one layer and one head: layers and "
                "heads > 1 need --model transformer",
            )
        parts = {
            k: getattr(self, k) for k in ("d_ff", "value", "layernorm", "residual")
        }
        if refused := model.refused_parts(**parts):
            bad("model", f"{', '.join(refused)}: parts of --model transformer")
        if self.seed + self.seeds > 2**32:
            bad(
                "seeds",
                f"seed + seeds - 1 = {self.seed + self.seeds - 1} must be below 2**32",
            )

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


#: A text run's pieces were hashed with every setting at its default left out (so
#: that a setting added later at a default that computes what was computed before
#: orphans none); the flow's solver was Tsit5 until the stiffness-aware default
#: (issue 31), so a run of Tsit5 keeps its pieces and one of the new default is
#: another computation.
TextConfig.hashed_defaults = {
    f.name: f.default for f in dataclasses.fields(TextConfig)
} | {"solver": "tsit5"}
