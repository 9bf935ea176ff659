"""The mean cross-entropy of a linear output layer, computed by row blocks.

For text vocabularies the last layer dominates a gradient: logits z = h W_P of
shape [n, d] for n windows and d types. Written plainly (``log_softmax`` then a
gather), XLA keeps several [n, d] temporaries alive (300 MB each at the fair
test's 10⁴ windows, d = 3 763, float64), and there the output layer's gradient
takes about three times as long as its three [n, m]×[m, d] products
(``benchmarks/text_scale_cost.py``).

Here the loss and its gradient are computed together, a block of rows at a time:
for a block, z = h_b W_P, the log-sum-exp, g = softmax(z) − onehot(target), and
the two products g W_Pᵀ and h_bᵀ g. Only [rows, d] temporaries exist. The function
carries a custom JVP whose tangent is linear in (dh, dW_P) with the precomputed
gradients as coefficients, so reverse mode needs no [n, d] residuals, and forward
mode over the gradient (the Hessian-vector products of the stiff solvers) runs
through the same blocked pass.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

#: Rows per block: a block's [rows, d] temporaries stay small (15 MB at d = 3 763 in
#: float64, against 300 MB for all 10⁴ windows) while each product keeps hundreds
#: of rows. Not tuned per machine.
BLOCK_ROWS = 512


def _blocked_pass(h, w, target, rows):
    """(Σ_n loss_n, ∂/∂h, ∂/∂W_P) of the summed cross-entropy, block by block."""
    n = h.shape[0]
    blocks = -(-n // rows)
    pad = blocks * rows - n
    hb = jnp.pad(h, ((0, pad), (0, 0))).reshape(blocks, rows, -1)
    tb = jnp.pad(target, (0, pad)).reshape(blocks, rows)
    keep = (jnp.arange(blocks * rows) < n).reshape(blocks, rows)
    types = jnp.arange(w.shape[1])

    def block(grad_w, xs):
        h_b, t_b, keep_b = xs
        z = h_b @ w  # [rows, d]
        top = jax.lax.stop_gradient(jnp.max(z, axis=-1, keepdims=True))
        e = jnp.exp(z - top)
        total = jnp.sum(e, axis=-1, keepdims=True)
        onehot = types == t_b[:, None]
        picked = jnp.sum(jnp.where(onehot, z, 0.0), axis=-1)
        loss = (jnp.log(total[:, 0]) + top[:, 0] - picked) * keep_b
        # padded rows have h = 0: they add nothing to h_bᵀ g, and their rows of
        # g W_Pᵀ are cut off below
        g = e / total - onehot
        return grad_w + h_b.T @ g, (jnp.sum(loss), g @ w.T)

    grad_w, (losses, grad_h) = jax.lax.scan(block, jnp.zeros_like(w), (hb, tb, keep))
    return jnp.sum(losses), grad_h.reshape(blocks * rows, -1)[:n], grad_w


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def _summed(h, w, target, rows):
    return _blocked_pass(h, w, target, rows)[0]


@_summed.defjvp
def _summed_jvp(rows, primals, tangents):
    h, w, target = primals
    dh, dw, _ = tangents
    value, grad_h, grad_w = _blocked_pass(h, w, target, rows)
    return value, jnp.vdot(dh, grad_h) + jnp.vdot(dw, grad_w)


def head_cross_entropy(
    hidden: Float[Array, "n m"],
    W_P: Float[Array, "m d"],
    target: Int[Array, " n"],
    *,
    rows: int = BLOCK_ROWS,
) -> Float[Array, ""]:
    """Mean over n of −log softmax(hidden W_P)[target]: the same value and
    derivatives (to rounding) as ``log_softmax`` then a gather, by blocks of
    ``rows`` rows. A target outside 0 .. d−1 contributes its log-sum-exp alone
    (callers guard ids: ``gflow.problems.losses.nan_unless_valid``)."""
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    return _summed(hidden, W_P, jnp.asarray(target), rows) / hidden.shape[0]
