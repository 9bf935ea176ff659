"""Losses of the attention model: the exact population loss and sampled sequence losses.

Both use the d×d forms M = W_E W_P and Φ = W_E W_A W_Eᵀ where they are cheaper than
gathering m-dimensional embeddings at every position (MODEL.md §2).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, PyTree, Real

from gflow.problems.markov import MarkovChain
from gflow.problems.model import AttentionModel


def population_attention(
    model: AttentionModel, pi: Real[ArrayLike, " d"]
) -> Float[Array, "d d"]:
    """a_ik = π_k exp(τΦ_ik) / Σ_l π_l exp(τΦ_il): query i's attention on key type k."""
    pi = jnp.asarray(pi, dtype=model.W_E.dtype)
    log_pi = jnp.where(pi > 0, jnp.log(jnp.where(pi > 0, pi, 1.0)), -jnp.inf)
    return jax.nn.softmax(model.tau * model.Phi + log_pi[None, :], axis=-1)


def population_logits(
    model: AttentionModel, pi: Real[ArrayLike, " d"]
) -> Float[Array, "d d"]:
    """f_i = Σ_k a_ik M_k: the logits after query i in an infinitely long context."""
    M = model.M
    f = population_attention(model, pi) @ M  # [d, d]
    return f + M if model.residual else f


def population_loss(model: AttentionModel, chain: MarkovChain) -> Float[Array, ""]:
    """The exact s→∞ loss L = Σ_i π_i Σ_j P_ij (−log softmax(f_i)_j) (MODEL.md §4)."""
    dtype = model.W_E.dtype
    P = jnp.asarray(chain.P, dtype=dtype)
    pi = jnp.asarray(chain.pi, dtype=dtype)
    logp = jax.nn.log_softmax(population_logits(model, pi), axis=-1)
    return -jnp.sum(pi[:, None] * P * logp)


def _use_dense(model: AttentionModel, dense: bool | None) -> bool:
    # The d×d form costs d² per sequence (last position) or s·s·d (all positions)
    # against m² + s·m and s·s·m for the gathered form: it wins while d ≤ m.
    return model.d_vocab <= model.d_model if dense is None else dense


def _last_logits_dense(model, Phi, M, context):
    scores = model.tau * Phi[context[-1], context]  # [s]
    attn = jax.nn.softmax(scores)
    weight = jnp.zeros(model.d_vocab, attn.dtype).at[context].add(attn)  # [d]
    out = weight @ M
    return out + M[context[-1]] if model.residual else out


def _causal_logits_dense(model, Phi, M, context):
    s = context.shape[0]
    scores = model.tau * Phi[context][:, context]  # [s, s]
    mask = jnp.tril(jnp.ones((s, s), dtype=bool))
    attn = jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)
    out = attn @ M[context]  # [s, d]
    return out + M[context] if model.residual else out


def _causal_logits_gathered(model, context):
    s = context.shape[0]
    emb = model.W_E[context]  # [s, m]
    scores = model.tau * (emb @ model.W_A) @ emb.T  # [s, s]
    mask = jnp.tril(jnp.ones((s, s), dtype=bool))
    attn = jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)
    out = attn @ emb  # [s, m]
    if model.residual:
        out = out + emb
    return out @ model.W_P


def _cross_entropy(logits, target):
    return -jnp.take_along_axis(
        jax.nn.log_softmax(logits, axis=-1), target[..., None], axis=-1
    )[..., 0]


def sequence_loss(
    model: AttentionModel | PyTree,
    tokens: Int[ArrayLike, "b s1"],
    *,
    all_positions: bool = False,
    dense: bool | None = None,
) -> Float[Array, ""]:
    """Mean cross-entropy of sampled sequences.

    Args:
        model: the attention model, or any model with ``model(context) -> [d]``
            logits of the next token (and ``model.causal_logits(context) -> [s, d]``
            for ``all_positions``), e.g. ``gflow.Transformer``.
        tokens: int [batch, s+1]; context ``tokens[:, :-1]``, target ``tokens[:, -1]``.
        all_positions: the causal objective that predicts every next token (each
            position attends to itself and the positions before it). Off by default:
            the paper's objective is the last position only.
        dense: force the d×d form (True) or the gathered-embedding form (False);
            None picks the cheaper one. Both give the same loss. AttentionModel only.
    """
    tokens = jnp.asarray(tokens)
    if tokens.ndim != 2 or tokens.shape[1] < 2:
        raise ValueError(
            f"tokens must be int [batch, s+1] with s >= 1, got {tokens.shape}"
        )
    context, target = tokens[:, :-1], tokens[:, -1]
    if not isinstance(model, AttentionModel):
        if dense:
            raise ValueError("dense=True is the d×d form of the AttentionModel only")
        if all_positions:
            if not hasattr(model, "causal_logits"):
                raise ValueError(
                    f"all_positions needs {type(model).__name__}.causal_logits"
                )
            logits = jax.vmap(model.causal_logits)(context)  # [b, s, d]
            return jnp.mean(_cross_entropy(logits, tokens[:, 1:]))
        return jnp.mean(_cross_entropy(jax.vmap(model)(context), target))
    use_dense = _use_dense(model, dense)
    if use_dense:
        Phi, M = model.Phi, model.M
    if all_positions:
        if use_dense:
            logits = jax.vmap(lambda c: _causal_logits_dense(model, Phi, M, c))(context)
        else:
            logits = jax.vmap(lambda c: _causal_logits_gathered(model, c))(context)
        return jnp.mean(_cross_entropy(logits, tokens[:, 1:]))
    if use_dense:
        logits = jax.vmap(lambda c: _last_logits_dense(model, Phi, M, c))(context)
    else:
        logits = jax.vmap(model)(context)
    return jnp.mean(_cross_entropy(logits, target))


class PopulationLoss(eqx.Module):
    """``loss_fn(model)`` for the population loss of a chain; its arrays are traced."""

    chain: MarkovChain

    def __call__(self, model: AttentionModel) -> Float[Array, ""]:
        return population_loss(model, self.chain)


class SequenceLoss(eqx.Module):
    """``loss_fn(model)`` for a fixed batch of token sequences (full-batch flow)."""

    tokens: Int[np.ndarray, "b s1"] | Int[Array, "b s1"]
    all_positions: bool = eqx.field(static=True, default=False)
    dense: bool | None = eqx.field(static=True, default=None)

    def __call__(self, model: AttentionModel | PyTree) -> Float[Array, ""]:
        return sequence_loss(
            model, self.tokens, all_positions=self.all_positions, dense=self.dense
        )
