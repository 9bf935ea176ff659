"""Hessian tools over the flattened floating-point parameters of a model.

Hessian-vector products (forward over reverse), the dense Hessian for small models, and
Lanczos with full re-orthogonalisation for the extreme eigenvalues of large ones. The
flow's Jacobian is −H, so these give its stiffness (λ_max) and unstable directions.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Float, PRNGKeyArray

from gflow.array_types import LossFn, Model


def flatten(model: Model) -> tuple[Float[Array, " n"], Callable[[Array], Model]]:
    """(x, unravel): the model's floating-point leaves as one vector, and the inverse.

    ``unravel(x)`` gives back a full model (static fields and non-float leaves kept).
    """
    params, static = eqx.partition(model, eqx.is_inexact_array)
    x, unflat = ravel_pytree(params)
    return x, lambda y: eqx.combine(unflat(y), static)


def flat_loss(
    loss_fn: LossFn, model: Model
) -> tuple[Callable[[Array], Float[Array, ""]], Float[Array, " n"]]:
    """(f, x0): ``f(x) = loss_fn(unravel(x))`` on the flat parameter vector, and x0."""
    x0, unravel = flatten(model)
    return (lambda x: loss_fn(unravel(x))), x0


def hvp(loss_fn: LossFn, model: Model, v: Float[Array, " n"]) -> Float[Array, " n"]:
    """H v at ``model``, with v a flat vector [n] (n = number of parameters)."""
    f, x0 = flat_loss(loss_fn, model)
    return jax.jvp(jax.grad(f), (x0,), (v,))[1]


@eqx.filter_jit
def dense_hessian(loss_fn: LossFn, model: Model) -> Float[Array, "n n"]:
    """The full Hessian [n, n] of ``loss_fn`` at ``model`` (small models only)."""
    f, x0 = flat_loss(loss_fn, model)
    H = jax.hessian(f)(x0)
    return (H + H.T) / 2


def lanczos(
    matvec: Callable[[Float[Array, " n"]], Float[Array, " n"]],
    v0: Float[Array, " n"],
    iters: int,
) -> tuple[Float[Array, " k"], Float[Array, "n k"]]:
    """Lanczos tridiagonalisation with full re-orthogonalisation.

    Args:
        matvec: a symmetric linear map [n] -> [n].
        v0: starting vector [n] (normalised here; must not be zero).
        iters: Krylov dimension k (<= n).

    Returns:
        (eigenvalues [k] ascending, Ritz vectors [n, k]) of the k×k tridiagonal matrix.
    """
    n = v0.shape[0]
    V = jnp.zeros((iters, n), v0.dtype).at[0].set(v0 / jnp.linalg.norm(v0))
    alpha = jnp.zeros(iters, v0.dtype)
    beta = jnp.zeros(iters, v0.dtype)

    def body(j, state):
        V, alpha, beta = state
        w = matvec(V[j])
        a = jnp.vdot(w, V[j])
        # full re-orthogonalisation against every earlier vector, twice for safety
        mask = (jnp.arange(iters) <= j)[:, None]
        for _ in range(2):
            w = w - (V * mask).T @ ((V * mask) @ w)
        b = jnp.linalg.norm(w)
        safe = b > 1e-12 * (jnp.abs(a) + 1.0)
        nxt = jnp.where(safe, w / jnp.where(safe, b, 1.0), 0.0)
        V = jnp.where(j + 1 < iters, V.at[jnp.minimum(j + 1, iters - 1)].set(nxt), V)
        return V, alpha.at[j].set(a), beta.at[j].set(jnp.where(safe, b, 0.0))

    V, alpha, beta = jax.lax.fori_loop(0, iters, body, (V, alpha, beta))
    T = jnp.diag(alpha) + jnp.diag(beta[:-1], 1) + jnp.diag(beta[:-1], -1)
    evals, evecs = jnp.linalg.eigh(T)
    return evals, V.T @ evecs


@eqx.filter_jit
def extreme_eigenpairs(
    loss_fn: LossFn,
    model: Model,
    *,
    key: PRNGKeyArray | None,
    iters: int = 40,
    v0: Float[Array, " n"] | None = None,
    scale: Float[Array, " n"] | None = None,
) -> tuple[Float[Array, " k"], Float[Array, "n k"]]:
    """Lanczos estimates of the Hessian's extreme eigenpairs at ``model``.

    Args:
        loss_fn: ``loss_fn(model) -> scalar``.
        model: where the Hessian is taken.
        key: PRNG key for the random start vector (ignored when ``v0`` is given).
        iters: Krylov dimension (clipped to the number of parameters).
        v0: optional warm start [n] (e.g. the previous top eigenvector along a flow).
        scale: optional positive D [n]: then the pairs are those of the symmetric
            D^{1/2} H D^{1/2}, whose eigenvalues are D H's (a preconditioned step's
            sharpness, ``gflow.analysis.preconditioned_sharpness``).

    Returns:
        (eigenvalues [k] ascending, eigenvectors [n, k]): the last entry approximates
        λ_max and the first λ_min; both converge fastest.
    """
    f, x0 = flat_loss(loss_fn, model)
    n = x0.shape[0]
    iters = min(iters, n)
    if v0 is None:
        if key is None:
            raise ValueError("extreme_eigenpairs needs a key or a start v0")
        v0 = jax.random.normal(key, (n,), x0.dtype)
    root = 1.0 if scale is None else jnp.sqrt(jnp.asarray(scale, x0.dtype))

    def matvec(v):
        return root * jax.jvp(jax.grad(f), (x0,), (root * v,))[1]

    return lanczos(matvec, jnp.asarray(v0, x0.dtype), iters)


def max_eigenvalue(
    loss_fn: LossFn,
    model: Model,
    *,
    key: PRNGKeyArray | None,
    iters: int = 40,
    v0: Float[Array, " n"] | None = None,
) -> tuple[Float[Array, ""], Float[Array, " n"]]:
    """λ_max of the Hessian and its eigenvector [n], by Lanczos (extreme_eigenpairs)."""
    evals, evecs = extreme_eigenpairs(loss_fn, model, key=key, iters=iters, v0=v0)
    return evals[-1], evecs[:, -1]
