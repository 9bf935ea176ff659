"""Sharpness along a trajectory and the step-size stability bound it implies.

λ_max(t) of the Hessian is tracked with warm-started Lanczos
(``gflow.analysis.hessian``): the top eigenvector at one saved time starts the Krylov
space at the next, so a few
iterations suffice. A discrete optimizer with step η leaves the flow once the flow's
sharpness crosses its stability bound c/η: c = 2 for GD, 2 + 2β for heavy ball with
momentum β (optax ``sgd(momentum=β)``), and about 38 for Adam with β₁ = 0.9
(the bound (2 + 2β₁)/(1 − β₁) of its preconditioned heavy-ball form).

For a preconditioned optimizer, θ ← θ − η D ⊙ m with D > 0 elementwise (Adam:
D = 1/(√v̂ + ε)), the sharpness that meets c/η is that of D H, whose eigenvalues are
those of the symmetric S = D^{1/2} H D^{1/2}: ``preconditioned_sharpness`` runs the
same Lanczos on S, and ``adam_scale`` reads D off an optax Adam state.

The measured counterpart for GD is the first loss rise recorded by the sweep
(``SweepRun.first_rise_step``): by the descent lemma GD's loss cannot rise while
ηλ_max < 2 on the step, so a rise certifies that the bound was crossed. On the
default model the rise comes after ``predicted_departure`` (GD lags the flow, and
the unstable mode needs steps to grow): see docs/flow_vs_optimizers.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import ArrayLike, Float, PRNGKeyArray, Real

from gflow.analysis.hessian import extreme_eigenpairs, flatten, max_eigenvalue
from gflow.array_types import LossFn, Model
from gflow.dynamics.trajectory import Trajectory


def sharpness_along(
    loss_fn: LossFn, traj: Trajectory, *, key: PRNGKeyArray, iters: int = 20
) -> Float[np.ndarray, " n"]:
    """λ_max of the Hessian at every snapshot of ``traj``, float [n].

    Lanczos with ``iters`` Krylov vectors, warm-started from the previous snapshot's
    top eigenvector (one compilation for the whole trajectory).
    """
    if traj.params is None:
        raise ValueError("sharpness_along needs parameter snapshots (save_params=True)")
    lams, v = [], None
    for i in range(len(traj)):
        model = traj.snapshot(i)
        if v is None:
            v = jax.random.normal(key, flatten(model)[0].shape, flatten(model)[0].dtype)
        lam, v = max_eigenvalue(loss_fn, model, key=key, iters=iters, v0=v)
        lams.append(float(lam))
    return np.asarray(lams)


def predicted_departure(
    t: Real[ArrayLike, " n"] | Sequence[float],
    lam_max: Real[ArrayLike, " n"] | Sequence[float],
    lr: float,
    stability: float,
) -> float | None:
    """The first saved t with λ_max(t) > stability/η (None: the bound is never met)."""
    t, lam_max = np.asarray(t, float), np.asarray(lam_max, float)
    over = lam_max > stability / lr
    return float(t[np.argmax(over)]) if over.any() else None


def preconditioned_sharpness(
    loss_fn: LossFn,
    model: Model,
    scale: Float[ArrayLike, " n"],
    *,
    key: PRNGKeyArray | None = None,
    iters: int = 20,
    v0: Float[ArrayLike, " n"] | None = None,
) -> tuple[Float[jax.Array, ""], Float[jax.Array, " n"]]:
    """λ_max(D H) of the step θ ← θ − η D ⊙ ∇L, and the top eigenvector of S.

    Args:
        loss_fn: ``loss_fn(model) -> scalar``.
        model: where the Hessian H is taken.
        scale: the positive per-parameter factor D, flat [n] in the order of
            ``gflow.analysis.flatten(model)`` (``adam_scale`` gives Adam's).
        key: PRNG key of the random start (ignored when ``v0`` is given).
        iters: Lanczos vectors (clipped to n).
        v0: warm start [n], e.g. the previous save's eigenvector.

    Returns:
        (λ_max of S = D^{1/2} H D^{1/2}, which has the eigenvalues of D H; its
        eigenvector [n]). Traceable: it may run inside a jitted, vmapped loop.
    """
    evals, evecs = extreme_eigenpairs(
        loss_fn, model, key=key, iters=iters, v0=v0, scale=jnp.asarray(scale)
    )
    return evals[-1], evecs[:, -1]


def adam_scale(
    nu, count, *, b2: float = 0.999, eps: float = 1e-8
) -> Float[jax.Array, " n"]:
    """Adam's D = 1/(√v̂ + ε), v̂ = ν/(1 − β₂^count), flat [n].

    ``nu`` is the second-moment pytree of an optax ``scale_by_adam`` state (the
    parameters' structure, so that it flattens in ``flatten(model)``'s order) and
    ``count`` its step count (≥ 1 after the first update)."""
    flat, _ = ravel_pytree(nu)
    nu_hat = flat / (1 - b2 ** jnp.asarray(count, flat.dtype))
    return 1.0 / (jnp.sqrt(nu_hat) + eps)
