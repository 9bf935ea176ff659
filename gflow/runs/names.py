"""The one table where the names a configuration gives become objects.

A configuration holds strategy names (``solver="auto"``, ``optimizer="adamw"``,
...) because names are what a user types and what ``config.json`` stores. They are
checked against these tables when the configuration is built (``NameTable.check``)
and turned into objects once, by a job's ``plan`` (``NameTable.build``); code
below that receives the objects and never reads a name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

import diffrax

from gflow.dynamics.optimizers import OPTIMIZERS as _OPTIMIZER_CLASSES
from gflow.dynamics.optimizers import AbstractOptimizer
from gflow.dynamics.references.central import CentralFlowReference
from gflow.dynamics.references.central_adaptive import central_flow_of
from gflow.dynamics.references.flow import FlowReference, ModifiedFlowReference
from gflow.dynamics.schedules import Constant, WarmupCosine
from gflow.dynamics.solvers import (
    EXPRB32,
    RKC2,
    ROCK4,
    AutoSwitch,
    SplitRKC2,
    StiffSwitch,
)
from gflow.runs.config import ConfigError, bad, check_flow_solver, check_seed
from gflow.text.fullbatch import FULL_BATCH_RULES
from gflow.text.sources import InContextSource, MarkovSource
from gflow.text.strategies import (
    DeepText,
    FixedTokenization,
    FullBatchGD,
    FullBatchOptimizer,
    IntegratedFlow,
    OneLayerText,
    SubwordTokenization,
)
from gflow.text.subword import KINDS as _SUBWORD_KINDS
from gflow.text.subword import WHITESPACE_MODES
from gflow.text.tokenize import TOKENIZERS as _FIXED_TOKENIZERS

T = TypeVar("T")


class NameTable(Mapping[str, Callable[..., T] | None], Generic[T]):
    """The names of one kind of strategy and, for each, what builds its object.

    A mapping name -> builder (a class or function); ``check`` refuses an unknown
    name with a ConfigError listing the known ones, ``build`` calls the builder.
    """

    def __init__(
        self,
        kind: str,
        builders: Mapping[str, Callable[..., T] | None],
        aliases: Mapping[str, str] | None = None,
        factories: Mapping[str, Callable[..., T]] | None = None,
    ):
        self.kind = kind
        self._builders = dict(builders)
        self._aliases = dict(aliases or {})  # other names of some entries
        # how ``build`` makes an entry, where that is not calling the entry itself
        self._factories = dict(factories or {})

    def __getitem__(self, name: str) -> Callable[..., T] | None:
        return self._builders[self._aliases.get(name, name)]

    def __contains__(self, name: object) -> bool:
        return name in self._builders or name in self._aliases

    def __iter__(self) -> Iterator[str]:
        return iter(self._builders)

    def __len__(self) -> int:
        return len(self._builders)

    def __repr__(self) -> str:
        return f"NameTable({self.kind!r}, {list(self._builders)})"

    def check(self, field: str, name: str) -> None:
        """ConfigError ``field: unknown <kind> 'name'; choose one of ...``."""
        if name not in self:
            raise ConfigError(
                f"{field}: unknown {self.kind} {name!r}; choose one of "
                f"{', '.join(self._builders)}"
            )

    def build(self, name: str, *args: Any, **kwargs: Any) -> T:
        """The object called ``name``, built with ``args`` and ``kwargs``."""
        self.check(self.kind, name)
        name = self._aliases.get(name, name)
        if name in self._factories:
            return self._factories[name](*args, **kwargs)
        if self[name] is None:
            raise TypeError(f"the {self.kind} {name!r} is a name only: no builder")
        return self[name](*args, **kwargs)


#: Diffrax's solvers and gflow's own (``gflow.solvers``) by the names of ``--solver``.
SOLVERS: NameTable[diffrax.AbstractSolver] = NameTable(
    "solver",
    {
        "auto": AutoSwitch,
        "euler": diffrax.Euler,
        "heun": diffrax.Heun,
        "bosh3": diffrax.Bosh3,
        "tsit5": diffrax.Tsit5,
        "dopri5": diffrax.Dopri5,
        "dopri8": diffrax.Dopri8,
        "kvaerno5": diffrax.Kvaerno5,
        "rkc2": RKC2,
        "split-rkc2": SplitRKC2,
        "rock4": ROCK4,
        "exprb32": EXPRB32,
        "stiff": StiffSwitch,
    },
)

#: The optimizers of ``gflow.dynamics``, built from a configuration's β, weight
#: decay and ε (each class's ``from_settings``). ``gd`` is SGD by the name ``gflow
#: text`` gives it on the full batch.
OPTIMIZERS: NameTable[AbstractOptimizer] = NameTable(
    "optimizer",
    {name: cls.from_settings for name, cls in _OPTIMIZER_CLASSES.items()},
    aliases={"gd": "sgd"},
)

#: The optimizers that can descend a fixed loss whole (``--batch 0``): those of
#: ``run_full_batch``'s one compiled loop.
FULL_BATCH_OPTIMIZERS = (
    *(name for name, cls in _OPTIMIZER_CLASSES.items() if cls in FULL_BATCH_RULES),
    "gd",
)

#: The references a sweep compares its members with, built for the sweep's
#: ``optimizer`` (the central flow is the optimizer's own: ``central_flow_of``).
REFERENCES = NameTable(
    "reference",
    {
        "flow": FlowReference,
        "modified": ModifiedFlowReference,
        "central": CentralFlowReference,
    },
    factories={
        "flow": lambda optimizer=None: FlowReference(),
        "modified": lambda optimizer=None: ModifiedFlowReference(),
        "central": lambda optimizer=None: (
            CentralFlowReference() if optimizer is None else central_flow_of(optimizer)
        ),
    },
)


def _constant(peak: float, *, steps: int, warmup_steps: int = 0, final=None):
    return Constant(peak, steps)


def _warmup_cosine(peak: float, *, steps: int, warmup_steps: int, final=0.0):
    return WarmupCosine(peak, warmup_steps, steps, final)


#: Step-size schedules (``gflow.dynamics.schedules``), built from the peak, the
#: steps, the warmup steps and the final step size: a constant step, or the linear
#: warmup from 0 to the peak then a cosine decay to ``final`` at the last step (the
#: values of optax's ``warmup_cosine_decay_schedule``). ``gflow train`` and
#: ``gflow text`` both take theirs from here.
SCHEDULES = NameTable(
    "schedule", {"constant": _constant, "warmup-cosine": _warmup_cosine}
)

#: How a deterministic text run follows the flow: full-batch GD or the flow itself
#: (``gflow.text.strategies``), built from the run's settings.
METHODS = NameTable(
    "method",
    {"gd": FullBatchGD, "flow": IntegratedFlow},
    factories={"gd": FullBatchGD.from_settings, "flow": IntegratedFlow.from_settings},
)

#: How ``gflow train`` descends its loss: the optimizer (``FullBatchOptimizer``
#: on the fixed sample with ``batch`` 0, else fresh minibatches), or a method of
#: ``METHODS`` on the fixed sample; built from the run's settings.
TRAINING = NameTable(
    "training method",
    {"optimizer": FullBatchOptimizer, "gd": FullBatchGD, "flow": IntegratedFlow},
    factories={
        "optimizer": FullBatchOptimizer.from_settings,
        "gd": FullBatchGD.from_settings,
        "flow": IntegratedFlow.from_settings,
    },
)

#: The models ``gflow text`` and ``gflow train`` train: the one-layer
#: ``AttentionModel`` (a ``PositionalAttentionModel`` with positions) or the deep
#: ``Transformer`` with any of its parts.
MODELS = NameTable(
    "model",
    {"attention": OneLayerText, "transformer": DeepText},
    factories={
        "attention": OneLayerText.from_settings,
        "transformer": DeepText.from_settings,
    },
)

#: How a corpus is cut into tokens: the fixed tokenisers and the subword kinds
#: trained on the corpus (offline).
TOKENIZERS = NameTable(
    "tokenizer",
    {
        **dict.fromkeys(_FIXED_TOKENIZERS, FixedTokenization.from_settings),
        **dict.fromkeys(_SUBWORD_KINDS, SubwordTokenization.from_settings),
    },
)


def check_model_run(cfg, methods: NameTable) -> None:
    """ConfigError for a setting that ``gflow text`` and ``gflow train`` share and
    that cannot run: the tokeniser (an unknown name or whitespace mode, or a
    subword vocabulary outside 32-100000 pieces), the method (``methods``: the
    command's table) and the flow's solver, the model's and schedule's names, a
    warmup outside [0, 1), the seed, and a float64-only method in float32."""
    TOKENIZERS.check("tokenizer", cfg.tokenizer)
    if cfg.whitespace not in WHITESPACE_MODES:
        bad("whitespace", f"must be one of {', '.join(WHITESPACE_MODES)}")
    if cfg.tokenizer in _SUBWORD_KINDS and not 32 <= cfg.vocab_size <= 100_000:
        bad(
            "vocab_size",
            f"a subword vocabulary needs 32-100000 pieces, got {cfg.vocab_size}",
        )
    methods.check("method", cfg.method)
    SOLVERS.check("solver", cfg.solver)
    check_flow_solver(cfg.solver)
    MODELS.check("model", cfg.model)
    SCHEDULES.check("schedule", cfg.schedule)
    if not 0 <= cfg.warmup < 1:
        bad("warmup", f"must lie in [0, 1), got {cfg.warmup}")
    check_seed(cfg.seed)
    if methods[cfg.method].float64 and not cfg.x64:
        bad("x64", "the flow needs float64 (tolerances near float32 epsilon)")


#: The sequence data sets ``gflow train`` samples by name (any other ``--data`` is
#: a text file or folder): the paper's chain and in-context Markov chains.
DATASETS = NameTable(
    "data set",
    {"markov": MarkovSource.from_settings, "icl-markov": InContextSource.from_settings},
)

#: Every kind of strategy a configuration can name, by kind.
NAMES: dict[str, NameTable] = {
    t.kind: t
    for t in (
        SOLVERS,
        OPTIMIZERS,
        REFERENCES,
        SCHEDULES,
        METHODS,
        TRAINING,
        MODELS,
        TOKENIZERS,
        DATASETS,
    )
}
