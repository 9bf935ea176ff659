"""What a text run's names become: the model it trains, how its deterministic run
follows the flow, and how a corpus is cut into tokens, each as an object.

``gflow.runs.names`` maps the names a configuration holds (``model="attention"``,
``method="gd"``, ``tokenizer="bpe"``) to these classes; a job's plan builds them
once (``from_settings``) and the loops call their methods, never a name.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import time
from pathlib import Path
from typing import Any, ClassVar

import equinox as eqx
import numpy as np

from gflow.array_types import LossFn, Model
from gflow.dynamics.flow import solve_flow
from gflow.dynamics.optimizers import SGD
from gflow.dynamics.trajectory import Trajectory
from gflow.problems.model import AttentionModel
from gflow.problems.transformer import Transformer
from gflow.text.fullbatch import run_full_batch
from gflow.text.positional import PositionalAttentionModel
from gflow.text.stability import stability_check
from gflow.text.subword import SubwordTokenizer
from gflow.text.tokenize import TOKENIZERS, Vocabulary


class Settings:
    """``from_settings``: a strategy built from a configuration's settings, each
    taken where the strategy has a field of that name and ignored elsewhere."""

    @classmethod
    def from_settings(cls, **settings: Any):
        own = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in settings.items() if k in own})


# ---------------------------------------------------------------- models


@dataclasses.dataclass(frozen=True)
class AbstractTextModel(Settings):
    """The model a text run trains: its initial draw and which observables apply.

    Frozen and compared by value, so that the jitted draw is compiled once per
    model shape (``init``: the key is traced).
    """

    d_model: int = 32
    init_scale: float = 1e-3
    positional: bool = False
    context: int = 32
    max_len: int | None = None

    #: Whether the one-layer row observables (``TextObservables``) apply.
    rows: ClassVar[bool]
    #: The Transformer settings the model takes beyond one layer and one head of
    #: plain attention (``check_parts``).
    parts: ClassVar[tuple[str, ...]] = ()

    #: The settings of a one-layer, one-head model without value, MLP, LayerNorm
    #: or residual stream.
    PLAIN: ClassVar[dict[str, Any]] = {
        "layers": 1,
        "heads": 1,
        "d_ff": None,
        "value": False,
        "layernorm": False,
        "residual": False,
    }

    @classmethod
    def refused_parts(cls, **settings: Any) -> list[str]:
        """The settings among ``settings`` that ask for more than the plain
        one-layer model where this model does not take them."""
        return [
            name
            for name, plain in cls.PLAIN.items()
            if name in settings and settings[name] != plain and name not in cls.parts
        ]

    @property
    def has_population_loss(self) -> bool:
        """Whether the paper's population loss (``gflow.population_loss``) is
        defined for the model."""
        return False

    @abc.abstractmethod
    def draw(self, d_vocab: int, key, dtype) -> Model:
        """The initial model (eagerly; ``init`` is its compiled form)."""

    def init(self, d_vocab: int, key, dtype=np.float32) -> Model:
        """The initial model of ``key``, drawn in one compiled program."""
        return _compiled_draw(self, d_vocab, np.dtype(dtype))(key)

    @property
    def positions(self) -> int | None:
        """How many learned positions the model has (None: none): ``max_len``
        where given, else ``context`` with ``positional``."""
        if self.max_len is not None:
            return self.max_len
        return self.context if self.positional else None


@functools.lru_cache(maxsize=8)
def _compiled_draw(model: AbstractTextModel, d_vocab: int, dtype):
    return eqx.filter_jit(lambda key: model.draw(d_vocab, key, dtype))


@dataclasses.dataclass(frozen=True)
class OneLayerText(AbstractTextModel):
    """The paper's one-layer ``AttentionModel`` (``PositionalAttentionModel`` with
    ``positional``, over ``context`` positions, or with ``max_len`` positions)."""

    rows: ClassVar[bool] = True

    @property
    def has_population_loss(self) -> bool:
        return self.positions is None  # the AttentionModel's

    def draw(self, d_vocab: int, key, dtype) -> Model:
        kwargs = dict(d_vocab=d_vocab, d_model=self.d_model, init_scale=self.init_scale)
        positions = self.positions
        if positions is not None:
            return PositionalAttentionModel.init(
                context_length=positions, key=key, dtype=dtype, **kwargs
            )
        return AttentionModel.init(key=key, dtype=dtype, **kwargs)


@dataclasses.dataclass(frozen=True)
class DeepText(AbstractTextModel):
    """A ``gflow.Transformer`` of ``layers`` × ``heads``: by default the one-layer
    model's blocks (no value, MLP, LayerNorm or residual stream), each switched on
    by its setting (``value``, ``d_ff``, ``layernorm``, ``residual``); learned
    positions with ``positional`` (over ``context``) or ``max_len``. Its
    observables are the per-head ones."""

    layers: int = 1
    heads: int = 1
    d_ff: int | None = None
    value: bool = False
    layernorm: bool = False
    residual: bool = False
    rows: ClassVar[bool] = False
    parts: ClassVar[tuple[str, ...]] = tuple(AbstractTextModel.PLAIN)

    def draw(self, d_vocab: int, key, dtype) -> Model:
        return Transformer.init(
            d_vocab=d_vocab,
            d_model=self.d_model,
            init_scale=self.init_scale,
            n_layers=self.layers,
            n_heads=self.heads,
            d_ff=self.d_ff,
            value=self.value,
            layernorm=self.layernorm,
            residual=self.residual,
            max_len=self.positions,
            key=key,
            dtype=dtype,
        )


# ----------------------------------------------- how a run follows the flow


@dataclasses.dataclass(frozen=True)
class AbstractFlowMethod(Settings):
    """How a text run's deterministic run follows the flow, to t = steps·lr."""

    lr: float = 0.25
    steps: int = 4000
    num_saves: int = 200

    #: Whether the method is an optimizer's run, at any schedule, whose form on
    #: fresh minibatches ``gflow train`` runs when given a batch (else it descends
    #: the fixed loss at the constant step ``lr``).
    optimizer_run: ClassVar[bool] = False
    #: Whether it computes in float64 only (tolerances near float32's epsilon).
    float64: ClassVar[bool] = False

    @abc.abstractmethod
    def run(self, loss: LossFn, model: Model) -> Trajectory:
        """The run from ``model``, with parameter snapshots."""

    def checked(self, loss: LossFn, traj: Trajectory, seed: int) -> Trajectory:
        """``traj`` with whatever check the method needs (none by default)."""
        return traj

    def shown(self) -> AbstractFlowMethod:
        """The method with its own progress shown where it has one (a flow's t,
        step size and solver on a terminal); the same method by default."""
        return self

    def watched(self, interrupt) -> AbstractFlowMethod:
        """The method asking ``interrupt`` (``gflow.dynamics.interrupt.
        SignalWatch``) from inside its compiled work where it can (a flow's solve
        then ends in KeyboardInterrupt at a signal); the same method by default."""
        return self


@dataclasses.dataclass(frozen=True)
class FullBatchGD(AbstractFlowMethod):
    """Full-batch GD of step ``lr``, checked against its stability bound at
    ``sharpness_checks`` of its saves (``stability_check``; 0: off)."""

    sharpness_checks: int = 0

    def run(self, loss: LossFn, model: Model) -> Trajectory:
        return run_full_batch(
            loss,
            model,
            optimizer=SGD(),
            learning_rate=self.lr,
            steps=self.steps,
            num_saves=self.num_saves,
        )

    def checked(self, loss: LossFn, traj: Trajectory, seed: int) -> Trajectory:
        """The run with λ_max at ``sharpness_checks`` of its saves and its stability
        ratio η·λ_max/2 in ``info["stability"]``, the check's wall time in
        ``stats["sharpness_s"]``."""
        if not self.sharpness_checks:
            return traj
        start = time.perf_counter()
        check = stability_check(
            loss, traj, self.lr, checks=self.sharpness_checks, seed=seed
        )
        return dataclasses.replace(
            traj,
            info={**traj.info, "stability": check},
            stats={**traj.stats, "sharpness_s": time.perf_counter() - start},
        )


@dataclasses.dataclass(frozen=True)
class FullBatchOptimizer(AbstractFlowMethod):
    """``optimizer`` (gflow's ``SGD``, ``Adam`` or ``AdamW``) at the step sizes of
    ``schedule`` on the whole fixed sample, for ``steps`` steps, each gradient
    clipped to global norm ``clip`` first (0: off): ``run_full_batch``'s one
    compiled loop, which every full-batch run of a model shape shares.

    The optimizer arm of ``gflow text --batch 0`` and ``gflow train --batch 0``."""

    optimizer: Any = None
    schedule: Any = None
    clip: float = 0.0
    optimizer_run: ClassVar[bool] = True

    def run(self, loss: LossFn, model: Model) -> Trajectory:
        return run_full_batch(
            loss,
            model,
            optimizer=self.optimizer,
            learning_rate=self.schedule,
            steps=self.steps,
            num_saves=self.num_saves,
            clip=self.clip,
        )


@dataclasses.dataclass(frozen=True)
class IntegratedFlow(AbstractFlowMethod):
    """The flow itself, integrated by ``solver`` (a Diffrax solver object) at
    ``rtol``, ``atol``, saved at ``num_saves`` + 1 even times; at most
    ``max_steps`` steps (then the status is ``max_steps``)."""

    solver: Any = None
    rtol: float = 1e-5
    atol: float = 1e-7
    max_steps: int = 1_000_000
    progress: bool | None = False
    interrupt: Any = None
    float64: ClassVar[bool] = True

    def shown(self) -> IntegratedFlow:
        """The flow with ``solve_flow``'s progress lines on a terminal."""
        return dataclasses.replace(self, progress=None)

    def watched(self, interrupt) -> IntegratedFlow:
        """The flow whose solve asks ``interrupt`` every 32 steps."""
        return dataclasses.replace(self, interrupt=interrupt)

    def run(self, loss: LossFn, model: Model) -> Trajectory:
        t1 = self.steps * self.lr
        return solve_flow(
            loss,
            model,
            t1=t1,
            ts=np.linspace(0.0, t1, self.num_saves + 1),
            solver=self.solver,
            rtol=self.rtol,
            atol=self.atol,
            max_steps=self.max_steps,
            save_params=True,
            progress=self.progress,
            interrupt=self.interrupt,
        )


# ------------------------------------------------------------ tokenisers


@dataclasses.dataclass(frozen=True)
class AbstractTokenization(Settings):
    """How a corpus becomes token ids: the pieces, the vocabulary and, for a
    trained subword tokeniser, the tokeniser (to save beside the run)."""

    vocab_size: int = 200

    @abc.abstractmethod
    def cut(self, text: str) -> tuple[list[str], Vocabulary, SubwordTokenizer | None]:
        """(tokens, vocabulary, trained tokeniser or None) of ``text``."""


@dataclasses.dataclass(frozen=True)
class FixedTokenization(AbstractTokenization):
    """A fixed tokeniser (``gflow.text.TOKENIZERS``: word, byte), keeping the
    ``vocab_size`` most frequent types."""

    tokenizer: str = "word"

    def cut(self, text: str):
        toks = TOKENIZERS[self.tokenizer](text)
        return toks, Vocabulary.build(toks, self.vocab_size), None


@dataclasses.dataclass(frozen=True)
class SubwordTokenization(AbstractTokenization):
    """A subword tokeniser of ``vocab_size`` pieces trained on the corpus
    (offline), or read from ``tokenizer_file`` (an earlier run's tokenizer.json,
    so that a run reuses its pieces); every piece is kept."""

    tokenizer: str = "bpe"
    whitespace: str = "isolated"
    tokenizer_file: str | None = None

    def cut(self, text: str):
        subword = self.tokenizer_of(text)
        toks = subword(text)
        return toks, Vocabulary.build(toks, subword.vocab_size), subword

    def tokenizer_of(self, text: str) -> SubwordTokenizer:
        if self.tokenizer_file is None:
            return SubwordTokenizer.train(
                text,
                kind=self.tokenizer,
                vocab_size=self.vocab_size,
                whitespace=self.whitespace,
            )
        path = self.tokenizer_file
        try:
            tok = SubwordTokenizer.from_json(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"tokenizer_file: {path}: {e}") from None
        if tok.kind != self.tokenizer:
            raise ValueError(
                f"tokenizer_file: {path} holds a {tok.kind} tokeniser, "
                f"not {self.tokenizer}"
            )
        return tok
