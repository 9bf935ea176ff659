"""Losses of the attention model: the exact population loss and sampled sequence losses.

Both use the d×d forms M = W_E W_P and Φ = W_E W_A W_Eᵀ where they are cheaper than
gathering m-dimensional embeddings at every position (MODEL.md §2). A sampled sequence
then enters only through its token-type counts: positions of the same type share a
score, so attention over s positions is attention over d types weighted by counts,
exactly as the population loss weights them by π.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, PyTree, Real

from gflow.problems.markov import MarkovChain
from gflow.problems.model import AttentionModel


def _type_forms(
    model: AttentionModel,
) -> tuple[Float[ArrayLike, "d d"], Float[ArrayLike, "d d"]]:
    """(Φ, M): Φ = (W_E W_Q)(W_E W_K)ᵀ, d·m² work instead of m³ for W_Q W_Kᵀ first."""
    if model.W_K is None:
        return model.Phi, model.M
    return (model.W_E @ model.W_Q) @ (model.W_E @ model.W_K).T, model.M


def population_attention(
    model: AttentionModel, pi: Real[ArrayLike, " d"]
) -> Float[Array, "d d"]:
    """a_ik = π_k exp(τΦ_ik) / Σ_l π_l exp(τΦ_il): query i's attention on key type k."""
    pi = jnp.asarray(pi, dtype=model.W_E.dtype)
    log_pi = jnp.where(pi > 0, jnp.log(jnp.where(pi > 0, pi, 1.0)), -jnp.inf)
    Phi, _ = _type_forms(model)
    return jax.nn.softmax(model.tau * Phi + log_pi[None, :], axis=-1)


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
    # The d×d form costs s·d per sequence to count token types (no parameters
    # involved) and d² (last position) or s·d² (all positions) for the logits,
    # against m² + s·m and s·s·m for the gathered form: it wins while d ≤ m.
    return model.d_vocab <= model.d_model if dense is None else dense


def _log_counts(counts):
    # log n with log 0 = −inf: a type absent from the context gets no attention
    return jnp.where(counts > 0, jnp.log(jnp.where(counts > 0, counts, 1.0)), -jnp.inf)


def _type_major(tokens, d, dtype):
    # one-hot with the type axis first, [d, ...]: the reductions over the d types then
    # run across contiguous sequences instead of along a short last axis
    return jax.nn.one_hot(tokens, d, dtype=dtype, axis=0)


def _dense_loss(model, Phi, M, query, counts, target):
    """Mean cross-entropy from the d×d forms, by token type; all arrays [d, n].

    All positions that hold type k share the score τΦ_{qk} of a query q, so the
    softmax over positions is a softmax over the d types weighted by n_k, the count of
    type k among the positions attended to: a_k = n_k exp(τΦ_{qk}) / Σ_l n_l
    exp(τΦ_{ql}). The parameters enter only through matrix products (no gather or
    scatter of Φ or M, which vmapped over a sweep's members became batched gathers).
    """
    scores = model.tau * (Phi.T @ query) + _log_counts(counts)  # [d, n]
    logits = M.T @ jax.nn.softmax(scores, axis=0)  # [d, n]
    if model.residual:
        logits = logits + M.T @ query
    return -jnp.sum(jax.nn.log_softmax(logits, axis=0) * target) / target.shape[1]


def _last_loss_dense(model, Phi, M, context, target):
    """The last-position loss: the query is x_s, the counts those of x_1..x_s."""
    d, dtype = model.d_vocab, M.dtype
    counts = jnp.sum(_type_major(context, d, dtype), axis=-1)  # [d, b]
    query = _type_major(context[:, -1], d, dtype)  # [d, b]
    return _dense_loss(model, Phi, M, query, counts, _type_major(target, d, dtype))


def _causal_loss_dense(model, Phi, M, context, target):
    """Every position: query x_i, the counts those of x_1..x_i; flattened [d, b·s]."""
    d, dtype = model.d_vocab, M.dtype
    onehot = _type_major(context, d, dtype)  # [d, b, s]
    counts = jnp.cumsum(onehot, axis=-1).reshape(d, -1)  # [d, b·s]
    target = _type_major(target, d, dtype).reshape(d, -1)
    return _dense_loss(model, Phi, M, onehot.reshape(d, -1), counts, target)


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
    if _use_dense(model, dense):
        Phi, M = _type_forms(model)
        if all_positions:
            return _causal_loss_dense(model, Phi, M, context, tokens[:, 1:])
        return _last_loss_dense(model, Phi, M, context, target)
    if all_positions:
        logits = jax.vmap(lambda c: _causal_logits_gathered(model, c))(context)
        return jnp.mean(_cross_entropy(logits, tokens[:, 1:]))
    return jnp.mean(_cross_entropy(jax.vmap(model)(context), target))


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
