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

    #: Whether the one-layer row observables (``TextObservables``) apply.
    rows: ClassVar[bool]

    @abc.abstractmethod
    def draw(self, d_vocab: int, key, dtype) -> Model:
        """The initial model (eagerly; ``init`` is its compiled form)."""

    def init(self, d_vocab: int, key, dtype=np.float32) -> Model:
        """The initial model of ``key``, drawn in one compiled program."""
        return _compiled_draw(self, d_vocab, np.dtype(dtype))(key)


@functools.lru_cache(maxsize=8)
def _compiled_draw(model: AbstractTextModel, d_vocab: int, dtype):
    return eqx.filter_jit(lambda key: model.draw(d_vocab, key, dtype))


@dataclasses.dataclass(frozen=True)
class OneLayerText(AbstractTextModel):
    """The paper's one-layer ``AttentionModel`` (``PositionalAttentionModel`` with
    ``positional``)."""

    rows: ClassVar[bool] = True

    def draw(self, d_vocab: int, key, dtype) -> Model:
        kwargs = dict(d_vocab=d_vocab, d_model=self.d_model, init_scale=self.init_scale)
        if self.positional:
            return PositionalAttentionModel.init(
                context_length=self.context, key=key, dtype=dtype, **kwargs
            )
        return AttentionModel.init(key=key, dtype=dtype, **kwargs)


@dataclasses.dataclass(frozen=True)
class DeepText(AbstractTextModel):
    """A ``gflow.Transformer`` of ``layers`` × ``heads`` with no values, MLP or
    LayerNorm (the one-layer model's blocks), learned positions with
    ``positional``; its observables are the per-head ones."""

    layers: int = 1
    heads: int = 1
    rows: ClassVar[bool] = False

    def draw(self, d_vocab: int, key, dtype) -> Model:
        return Transformer.init(
            d_vocab=d_vocab,
            d_model=self.d_model,
            init_scale=self.init_scale,
            n_layers=self.layers,
            n_heads=self.heads,
            max_len=self.context if self.positional else None,
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

    @abc.abstractmethod
    def run(self, loss: LossFn, model: Model) -> Trajectory:
        """The run from ``model``, with parameter snapshots."""

    def checked(self, loss: LossFn, traj: Trajectory, seed: int) -> Trajectory:
        """``traj`` with whatever check the method needs (none by default)."""
        return traj


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
class IntegratedFlow(AbstractFlowMethod):
    """The flow itself, integrated by ``solver`` (a Diffrax solver object) at
    ``rtol``, ``atol``, saved at ``num_saves`` + 1 even times."""

    solver: Any = None
    rtol: float = 1e-5
    atol: float = 1e-7

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
            save_params=True,
            progress=False,
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
