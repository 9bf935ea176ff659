"""Observables of in-context Markov chains (ICL-MC, ``gflow.InContextMarkov``): the
model's distance to each in-context strategy, and what its heads attend to.

Strategy distances (the quantity of the phase figure of Edelman et al. 2024): with
p_θ(·|x_0..x_t) = softmax(logits[t]) and q_g the predictive of strategy g
(``STRATEGIES``: uniform, unigram, bigram),

    KL_g = mean over sequences and positions t = 0..n-2 of KL(q_g ‖ p_θ)
         = Σ_j q_g(j) (log q_g(j) − log p_θ(j)).

A model that has learned strategy g has KL_g ≈ 0; the last position's prediction
(of a token not in the batch) is left out, as in a causal loss.

Head labels, for attention weights a[l, h, i, j] (query i, key j ≤ i) on tokens x:

- ``previous``: the mass a[i, i−1] on the previous position, averaged over the
  queries i >= 1 — 1 for a pure previous-token head;
- ``after_copy``: Σ_{1 <= j <= i, x_{j−1} = x_i} a[i, j], the mass on the positions
  that follow an earlier occurrence of the current token, averaged over the queries
  with at least one such position — 1 for a pure (statistical) induction head, whose
  keys j carry x_{j−1} (moved there by a layer-0 previous-token head) and whose
  values x_j are the successors of the current state;
- ``after_copy_chance``: what uniform causal attention would score on the same
  tokens and queries (about 1/k on ICL-MC), the level a label is judged against.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from gflow.problems.icl_markov import InContextMarkov


@dataclasses.dataclass(frozen=True)
class StrategyDistances:
    """KL(q_g ‖ p_θ) in nats for each strategy of ``STRATEGIES``, and the model's
    cross-entropy on the batch's next tokens."""

    uniform: float
    unigram: float
    bigram: float
    loss: float

    def as_tuple(self) -> tuple[float, float, float]:
        """The three distances in ``STRATEGIES`` order."""
        return (self.uniform, self.unigram, self.bigram)


def strategy_kl(
    task: InContextMarkov, logits: Float[Array, "b n k"], tokens: Int[Array, "b n"]
) -> Float[Array, "3"]:
    """KL(q_g ‖ p_θ) for g in ``STRATEGIES``, averaged over the batch and the
    positions 0..n-2 (a traceable array; ``strategy_distances`` wraps it)."""
    if logits.shape[:2] != tokens.shape or logits.shape[-1] != task.states:
        raise ValueError(
            f"logits {logits.shape} must be [batch, length, {task.states}] for "
            f"tokens {tokens.shape}"
        )
    q = task.strategy_probabilities(tokens)[:, :, :-1]  # [3, b, s, k]
    log_p = jax.nn.log_softmax(logits[:, :-1], axis=-1)  # [b, s, k]
    kl = jnp.sum(q * (jnp.log(q) - log_p[None]), axis=-1)  # [3, b, s]
    return kl.mean(axis=(1, 2))


def strategy_distances(
    task: InContextMarkov, logits: Float[Array, "b n k"], tokens: Int[Array, "b n"]
) -> StrategyDistances:
    """The model's KL distance to each strategy on a batch (module docstring).

    Args:
        task: the ICL-MC task (states k, prior α).
        logits: the model's next-token logits at every position, [batch, n, k].
        tokens: the batch, int [batch, n].
    """
    kl, loss = _distances(task, logits, tokens)
    return StrategyDistances(*(float(v) for v in kl), loss=float(loss))


@eqx.filter_jit
def _distances(task, logits, tokens):
    """The KL distances and the cross-entropy of ``strategy_distances``."""
    log_p = jax.nn.log_softmax(logits[:, :-1], axis=-1)
    target = jax.nn.one_hot(tokens[:, 1:], task.states)
    return strategy_kl(task, logits, tokens), -jnp.sum(target * log_p, axis=-1).mean()


@dataclasses.dataclass(frozen=True)
class InductionLabels:
    """Per layer and head ([L, H] arrays): the mass on the previous token, on the
    positions after earlier copies of the current token, and the latter's chance
    level under uniform causal attention (module docstring)."""

    previous: np.ndarray
    after_copy: np.ndarray
    after_copy_chance: float


def induction_labels(
    attention: Float[Array, "b l h n n"], tokens: Int[Array, "b n"]
) -> InductionLabels:
    """Label every head of a batch of attention weights (module docstring).

    Args:
        attention: causal weights, [batch, layers, heads, n, n] (query, key), as
            ``jax.vmap(model.attention)(tokens)`` gives for a ``gflow.Transformer``.
        tokens: the batch, int [batch, n], n >= 2.
    """
    b, _, _, n, n2 = attention.shape
    if n != n2 or tokens.shape != (b, n) or n < 2:
        raise ValueError(
            f"attention {attention.shape} must be [batch, layers, heads, n, n] with "
            f"n >= 2 for tokens {tokens.shape}"
        )
    previous, after, chance = _labels(attention, tokens)
    return InductionLabels(
        previous=np.asarray(previous),
        after_copy=np.asarray(after),
        after_copy_chance=float(chance),
    )


@jax.jit
def _labels(attention, tokens):
    """The arrays of ``induction_labels``: previous, after_copy, chance."""
    n = tokens.shape[1]
    # previous[b, l, h] = mean over i >= 1 of a[i, i-1]
    sub = jnp.diagonal(attention, offset=-1, axis1=-2, axis2=-1)  # [b, l, h, n-1]
    previous = sub.mean(axis=(0, -1))
    # eligible[b, i, j]: 1 <= j <= i and x_{j-1} = x_i
    i = jnp.arange(n)[:, None]
    j = jnp.arange(n)[None, :]
    before = jnp.concatenate([jnp.full_like(tokens[:, :1], -1), tokens[:, :-1]], axis=1)
    eligible = (
        (before[:, None, :] == tokens[:, :, None]) & (j >= 1) & (j <= i)
    )  # [b, n, n]
    has = eligible.any(-1)  # [b, n]: queries with at least one such key
    mass = jnp.sum(attention * eligible[:, None, None], axis=-1)  # [b, l, h, n]
    count = jnp.maximum(has.sum(), 1)
    after = jnp.sum(mass * has[:, None, None], axis=(0, -1)) / count
    chance = jnp.sum(eligible.sum(-1) / (i[:, 0] + 1)[None] * has) / count
    return previous, after, chance
