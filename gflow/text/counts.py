"""The last-token loss written over token types weighted by their window counts.

Without positions the last position's score on key j depends only on its type, so
softmax over the s positions equals a softmax over types k with weights c_nk (the
count of type k in window n):  a_nk = c_nk e^{τ z_nk} / Σ_l c_nl e^{τ z_nl}, with
z_nk = W_E[x_{n,s}] W_A W_E[k]ᵀ. Then logits_n = (a_n W_E) W_P. Everything is a dense
[n, d] × [d, m] product: no per-position gather whose gradient is a scatter of n·s
rows, which is what makes the gathered form slow on CPU at text vocabularies.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike
from jaxtyping import Array, ArrayLike, Float, Int

from gflow.problems.model import AttentionModel

#: Stands in for log 0 (a type absent from a window): finite, so gradients stay 0.
_LOG_ZERO = -1e30


def window_log_counts(
    windows: Int[ArrayLike, "n s1"], d: int
) -> Float[np.ndarray, "n d"]:
    """log c_nk of each type k in the context ``windows[n, :-1]`` (log 0 as -1e30).

    Args:
        windows: int [n, s+1]; d: vocabulary size. Returns float64 [n, d].
    """
    ctx = np.asarray(windows)[:, :-1]
    counts = np.zeros((ctx.shape[0], d))
    np.add.at(counts, (np.arange(ctx.shape[0])[:, None], ctx), 1.0)
    with np.errstate(divide="ignore"):
        return np.where(counts > 0, np.log(counts), _LOG_ZERO)


def batch_log_counts(
    windows: Int[Array, "n s1"], d: int, dtype: DTypeLike | None = None
) -> Float[Array, "n d"]:
    """``window_log_counts`` in jnp, for batches drawn inside jit (float [n, d])."""
    ctx = windows[:, :-1]
    n = ctx.shape[0]
    zeros = jnp.zeros((n, d), dtype or jnp.result_type(float))
    counts = zeros.at[jnp.arange(n)[:, None], ctx].add(1.0)
    return jnp.where(counts > 0, jnp.log(jnp.maximum(counts, 1.0)), _LOG_ZERO)


def type_attention_counts(
    model: AttentionModel, log_counts: Float[Array, "n d"], last: Int[Array, " n"]
) -> Float[Array, "n d"]:
    """a_nk: the last position's attention mass on each type (sums to 1 over k)."""
    q = model.W_E[last] @ model.W_A  # [n, m]
    scores = model.tau * (q @ model.W_E.T)  # [n, d]
    return jax.nn.softmax(scores + log_counts.astype(scores.dtype), axis=-1)


def counts_loss(
    model: AttentionModel, log_counts: Float[Array, "n d"], windows: Int[Array, "n s1"]
) -> Float[Array, ""]:
    """The last-token cross-entropy of ``gflow.sequence_loss`` in the counts form."""
    last, target = windows[:, -2], windows[:, -1]
    a = type_attention_counts(model, log_counts, last)
    out = a @ model.W_E  # [n, m]
    if model.residual:
        out = out + model.W_E[last]
    logp = jax.nn.log_softmax(out @ model.W_P, axis=-1)  # [n, d]
    return -jnp.mean(jnp.take_along_axis(logp, target[:, None], axis=-1))
