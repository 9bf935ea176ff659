"""Critical points near a plateau: Newton on ∇L = 0, Hessian spectrum, linearised flow.

From a state on a plateau, ``newton_critical_point`` runs Newton's method on ∇L = 0
with the dense Hessian and a spectral pseudo-inverse (eigenvalues below ``rcond``·λ_max
in magnitude are dropped: the loss has continuous symmetries, e.g. W_E → W_E G,
W_P → G⁻¹W_P, so the Hessian is singular at every critical point). Near a saddle
this converges to the saddle, where gradient descent on |∇L|² would crawl.
``hessian_spectrum`` and ``block_weights`` say which parameter block each unstable
direction lives in, and ``linearised_flow`` gives δθ(t) = exp(−Ht) δθ₀ to compare with
the actual flow started at θ* + δθ₀. Dense: for small models (n up to a few
thousand); gflow.analysis.hessian.extreme_eigenpairs (Lanczos) gives the extreme
pairs of large ones.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from gflow.analysis.hessian import dense_hessian, flatten
from gflow.array_types import LossFn, Model, RealVector


@eqx.filter_jit
def _newton_step(loss_fn, model, rcond):
    x, unravel = flatten(model)
    g = jax.grad(lambda y: loss_fn(unravel(y)))(x)
    H = dense_hessian(loss_fn, model)
    lam, V = jnp.linalg.eigh(H)
    keep = jnp.abs(lam) > rcond * jnp.max(jnp.abs(lam))
    step = V @ jnp.where(keep, (V.T @ g) / jnp.where(keep, lam, 1.0), 0.0)
    return unravel(x - step), jnp.linalg.norm(g)


def newton_critical_point(
    loss_fn: LossFn,
    model: Model,
    *,
    iters: int = 20,
    tol: float = 1e-10,
    rcond: float = 1e-8,
) -> tuple[Model, list[float]]:
    """Newton's method on ∇L = 0 from ``model``.

    Args:
        loss_fn: ``loss_fn(model) -> scalar``.
        model: the start (a state on a plateau).
        iters: at most this many Newton steps.
        tol: stop once |∇L| < tol.
        rcond: relative cut-off of the Hessian's pseudo-inverse.

    Returns:
        (model at the critical point, list of |∇L| before each step and at the end).
    """
    norms = []
    for _ in range(iters):
        new, gnorm = _newton_step(loss_fn, model, rcond)
        norms.append(float(gnorm))
        if norms[-1] < tol:
            return model, norms
        model = new
    _, gnorm = _newton_step(loss_fn, model, rcond)
    norms.append(float(gnorm))
    return model, norms


def hessian_spectrum(
    loss_fn: LossFn, model: Model
) -> tuple[Float[np.ndarray, " n"], Float[np.ndarray, "n n"]]:
    """(eigenvalues [n] ascending, eigenvectors [n, n]) of the dense Hessian."""
    lam, V = jnp.linalg.eigh(dense_hessian(loss_fn, model))
    return np.asarray(lam), np.asarray(V)


def block_slices(model: Model) -> dict[str, slice]:
    """Name -> slice of the flat parameter vector for each array field of the model."""
    out, start = {}, 0
    for name in ("W_E", "W_Q", "W_K", "W_P"):
        leaf = getattr(model, name, None)
        if leaf is None:
            continue
        out[name] = slice(start, start + leaf.size)
        start += leaf.size
    x, _ = flatten(model)
    if start != x.size:
        raise ValueError("block_slices needs an AttentionModel (W_E, W_Q, W_K, W_P)")
    return out


def block_weights(
    model: Model, vectors: Float[ArrayLike, "n k"]
) -> dict[str, Float[np.ndarray, " k"]]:
    """Fraction of each (unit) column's squared norm in each parameter block."""
    vectors = np.asarray(vectors)
    return {
        name: np.sum(vectors[s] ** 2, axis=0) for name, s in block_slices(model).items()
    }


def linearised_flow(
    lam: Float[ArrayLike, " n"],
    V: Float[ArrayLike, "n n"],
    delta0: Float[ArrayLike, " n"],
    ts: RealVector,
) -> Float[np.ndarray, "T n"]:
    """δθ(t) = V exp(−Λt) Vᵀ δθ₀ at every t in ``ts``: [len(ts), n]."""
    coef = np.asarray(V).T @ np.asarray(delta0)  # [n]
    decay = np.exp(-np.outer(np.asarray(ts), np.asarray(lam)))  # [T, n]
    return (decay * coef) @ np.asarray(V).T
