"""Observables recorded along runs: functions of the model, evaluated inside jit.

What runs record is defined in ``gflow.dynamics.metrics``; here are the observables of
the attention model (entropies, singular values, the population attention matrix).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int, PyTree, Real

from gflow.problems.losses import population_attention
from gflow.problems.markov import MarkovChain
from gflow.problems.model import AttentionModel


def singular_values(W: Float[ArrayLike, "a b"]) -> Float[Array, " k"]:
    """Singular values of W in decreasing order."""
    return jnp.linalg.svd(W, compute_uv=False)


def entropy(p: Float[ArrayLike, "... n"], axis: int = -1) -> Float[Array, "..."]:
    """Shannon entropy (nats) along ``axis``, with 0 log 0 = 0."""
    safe = jnp.where(p > 0, p, 1.0)
    return -jnp.sum(jnp.where(p > 0, p * jnp.log(safe), 0.0), axis=axis)


def attention_entropy(
    model: AttentionModel | PyTree, data: Real[ArrayLike, " d"] | Int[ArrayLike, "b s1"]
) -> Float[Array, ""] | Float[Array, "l h"]:
    """Attention entropy (nats) of the one-layer model or of every head of a deep one.

    For an ``AttentionModel``, ``data`` is π [d] and the result the π-weighted
    entropy Σ_i π_i H(a_i·) of the population attention matrix. For a model with
    ``model.attention(context) -> [L, H, s, s]`` (``gflow.Transformer``), ``data``
    is a sample of token sequences [b, s+1] and the result, [L, H], the entropy of
    the last position's attention row over the contexts ``data[:, :-1]``, averaged
    over the sample.
    """
    if isinstance(model, AttentionModel):
        pi = jnp.asarray(data, dtype=model.W_E.dtype)
        return jnp.sum(pi * entropy(population_attention(model, pi)))
    contexts = jnp.asarray(data)[:, :-1]
    attn = jax.vmap(model.attention)(contexts)  # [b, L, H, s, s]
    return jnp.mean(entropy(attn[..., -1, :]), axis=0)


class MarkovObservables(eqx.Module):
    """The default observables of a Markov population run (used by ``gflow flow``).

    Calling it on a model gives the π-weighted attention entropy, the d×d population
    attention matrix, its column on the most frequent token, and the singular values
    of W_E, W_P and W_A. As a Module its π is traced, so a new chain does not recompile.
    """

    pi: Float[Array, " d"]

    def __init__(self, chain: MarkovChain):
        self.pi = jnp.asarray(chain.pi)

    def __call__(self, model: AttentionModel) -> dict[str, Float[Array, "..."]]:
        pi = self.pi.astype(model.W_E.dtype)
        attn = population_attention(model, pi)
        return {
            "attention_entropy": jnp.sum(pi * entropy(attn)),
            "attention": attn,
            "attention_on_top": attn[:, jnp.argmax(pi)],
            "sv_W_E": singular_values(model.W_E),
            "sv_W_P": singular_values(model.W_P),
            "sv_W_A": singular_values(model.W_A),
        }
