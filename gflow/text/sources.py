"""The sequence data sets ``gflow train`` samples (``--data markov``, ``--data
icl-markov``), as objects beside the text corpora: what the name table
``gflow.runs.DATASETS`` builds from a configuration's settings.

A source gives fresh minibatches (``stream``), the held-out sample, the reference
losses a run is read against, and the observables of its own task (for in-context
Markov chains, the model's KL distance to each strategy).
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int, PRNGKeyArray

from gflow.analysis.induction import strategy_kl
from gflow.array_types import LossFn
from gflow.problems.icl_markov import STRATEGIES, InContextMarkov
from gflow.problems.losses import PopulationLoss
from gflow.problems.markov import MarkovChain
from gflow.text.strategies import Settings


class SourceStream(eqx.Module):
    """Fresh minibatches of a source: ``stream(key) -> tokens [batch, length]``."""

    source: Any
    batch: int = eqx.field(static=True)
    length: int = eqx.field(static=True)

    def __call__(self, key: PRNGKeyArray) -> Int[Array, "b n"]:
        return self.source.sample(key=key, batch=self.batch, length=self.length)


@dataclasses.dataclass(frozen=True)
class AbstractSource(Settings):
    """A data set of token sequences that can be sampled afresh (built from a
    configuration's settings by ``from_settings``)."""

    #: The settings that define the source (named in a configuration error).
    settings: ClassVar[str]

    @abc.abstractmethod
    def check(self) -> None:
        """ValueError if the settings define no data set."""

    @property
    @abc.abstractmethod
    def d_vocab(self) -> int:
        """The vocabulary size."""

    @abc.abstractmethod
    def sample(self, *, key: PRNGKeyArray, batch: int, length: int):
        """``batch`` sequences of ``length`` tokens, int32."""

    @abc.abstractmethod
    def references(self, length: int, *, key: PRNGKeyArray) -> dict[str, float]:
        """The losses a run on sequences of ``length`` tokens is read against."""

    def observe(self, model, tokens: np.ndarray) -> dict[str, float]:
        """The task's own measures of ``model`` on ``tokens`` (none by default)."""
        return {}

    def stream(self, *, batch: int, length: int) -> SourceStream:
        return SourceStream(self, batch, length)

    def population_loss(self) -> LossFn:
        """The exact expected loss over the data set (ValueError where there is
        none in closed form)."""
        raise ValueError(f"{type(self).__name__} has no exact population loss")


@dataclasses.dataclass(frozen=True)
class MarkovSource(AbstractSource):
    """The paper's chain (``MarkovChain.from_lambda(pi, lam)``)."""

    pi: tuple[float, ...] = (0.75, 0.19, 0.05, 0.01)
    lam: float = 0.5
    settings: ClassVar[str] = "pi/lam"

    def check(self) -> None:
        self.chain  # noqa: B018 (MarkovChain.from_lambda checks pi and lam)

    @property
    def chain(self) -> MarkovChain:
        return MarkovChain.from_lambda(pi=self.pi, lam=self.lam)

    @property
    def d_vocab(self) -> int:
        return len(self.pi)

    def sample(self, *, key, batch, length):
        return self.chain.sample(key=key, batch=batch, length=length)

    def references(self, length, *, key) -> dict[str, float]:
        chain = self.chain
        return {"unigram_loss": chain.unigram_loss, "bayes_loss": chain.bayes_loss}

    def population_loss(self) -> PopulationLoss:
        """The paper's population loss of the chain (the attention model's)."""
        return PopulationLoss(self.chain)


@dataclasses.dataclass(frozen=True)
class InContextSource(AbstractSource):
    """In-context Markov chains (``gflow.InContextMarkov``): every sequence draws
    its own transition matrix, rows Dirichlet(α), over ``states`` states."""

    states: int = 3
    alpha: float = 1.0
    settings: ClassVar[str] = "states/alpha"

    def check(self) -> None:
        self.task  # noqa: B018 (InContextMarkov checks k and α)

    @property
    def task(self) -> InContextMarkov:
        return InContextMarkov(states=self.states, alpha=self.alpha)

    @property
    def d_vocab(self) -> int:
        return self.states

    def sample(self, *, key, batch, length):
        return self.task.sample(key=key, batch=batch, length=length)

    def references(self, length, *, key) -> dict[str, float]:
        """Each strategy's expected loss over the positions (``<strategy>_loss``,
        the bigram's the Bayes-optimal one), Monte Carlo where enumeration does not
        fit, and the limit of a predictor that knows the matrix."""
        losses = self.task.strategy_losses(length, key=key, samples=4000)
        out = {f"{g}_loss": float(losses.of(g)[0]) for g in STRATEGIES}
        out["bayes_loss"] = out["bigram_loss"]
        out["known_matrix_loss"] = self.task.bayes_limit()
        return out

    def observe(self, model, tokens) -> dict[str, float]:
        """``kl_<strategy>``: the model's KL distance to each strategy's
        predictions on ``tokens``, averaged over sequences and positions."""
        kl = np.asarray(_strategy_kl(self.task, model, np.asarray(tokens)))
        return {f"kl_{g}": float(v) for g, v in zip(STRATEGIES, kl)}


@eqx.filter_jit
def _strategy_kl(task, model, tokens):
    """The KL of the model's predictions at positions 0..n-2, from the contexts
    ``tokens[:, :-1]`` (a model with learned positions has exactly that many); the
    last position, which ``strategy_kl`` does not read, is padded."""
    logits = jax.vmap(model.causal_logits)(tokens[:, :-1])
    logits = jnp.concatenate([logits, jnp.zeros_like(logits[:, :1])], axis=1)
    return strategy_kl(task, logits, tokens)
