"""Sharpness along a trajectory and the step-size stability bound it implies.

λ_max(t) of the Hessian is tracked with warm-started Lanczos
(``gflow.analysis.hessian``): the top eigenvector at one saved time starts the Krylov
space at the next, so a few
iterations suffice. A discrete optimizer with step η leaves the flow once the flow's
sharpness crosses its stability bound c/η: c = 2 for GD, 2 + 2β for heavy ball with
momentum β (optax ``sgd(momentum=β)``), and about 38 for Adam with β₁ = 0.9
(the bound (2 + 2β₁)/(1 − β₁) of its preconditioned heavy-ball form).

The measured counterpart for GD is the first loss rise recorded by the sweep
(``SweepRun.first_rise_step``): by the descent lemma GD's loss cannot rise while
ηλ_max < 2 on the step, so a rise certifies that the bound was crossed. On the
default model the rise comes after ``predicted_departure`` (GD lags the flow, and
the unstable mode needs steps to grow): see docs/flow_vs_optimizers.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from jaxtyping import ArrayLike, Float, PRNGKeyArray, Real

from gflow.analysis.hessian import flatten, max_eigenvalue
from gflow.array_types import LossFn
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
