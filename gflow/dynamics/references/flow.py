"""Reference trajectories a discrete optimizer is compared with, as strategy objects.

- ``FlowReference``: the gradient flow dθ/dt = −∇L, solved once in float64 at the
  union of all members' times and reused by every member. GD approaches it at order 1.
- ``ModifiedFlowReference``: the modified-equation flow dθ/dt = −∇(L + (η/4)|∇L|²),
  one solve per η (η is traced: one compilation). GD approaches it at order 2 while
  ηλ_max stays well below 2.

Every reference gives, for member times ``t`` [S], a Trajectory with parameter
snapshots at exactly those times and the *original* loss as its ``"loss"`` metric.
The momentum and Adam ODEs are in ``gflow.dynamics.references.optimizer_odes``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Real

from gflow.array_types import LossFn, Model, Observables, RealVector
from gflow.dynamics.flow import solve_flow
from gflow.dynamics.references.base import (
    AbstractReference,
    at_times,
    evaluate_along,
    union_times,
)
from gflow.dynamics.trajectory import Trajectory


class ModifiedLoss(eqx.Module):
    """L̃ = L + (η/4)|∇L|²: the loss whose flow GD follows to second order in η."""

    loss_fn: LossFn
    eta: Float[Array, ""]

    def __call__(self, model: Model) -> Float[Array, ""]:
        loss, grads = eqx.filter_value_and_grad(self.loss_fn)(model)
        sq = sum(jnp.sum(g**2) for g in jax.tree.leaves(grads))
        return loss + 0.25 * self.eta * sq


def _solve_at(loss_fn, model, times, rtol, atol, observables) -> list[Trajectory]:
    union = union_times(times)
    # pad to a fixed length (repeating the last time) so that the compiled solve is
    # reused by every sweep with the same number of members and saves
    size = sum(len(t) for t in times)
    padded = np.concatenate([union, np.repeat(union[-1:], size - len(union))])
    traj = solve_flow(
        loss_fn,
        model,
        t1=float(union[-1]),
        ts=padded,
        rtol=rtol,
        atol=atol,
        save_params=True,
        observables=observables,
        progress=False,
    )
    if traj.status != "success":
        raise RuntimeError(f"the reference flow ended with status {traj.status!r}")
    return [at_times(traj, union, t) for t in times]


class FlowReference(AbstractReference):
    """The gradient flow, one float64 solve shared by every member."""

    rtol: float = 1e-10
    atol: float = 1e-12
    name: ClassVar[str] = "flow"

    def hyperparams(self, lr: float) -> dict[str, float]:
        """GD at step η: ``{"learning_rate": η}``."""
        return {"learning_rate": lr}

    def solve(
        self,
        loss_fn: LossFn,
        model: Model,
        times: Sequence[Real[ArrayLike, " _S"]],
        lrs: RealVector,
        observables: Observables = None,
    ) -> list[Trajectory]:
        """One Trajectory per member, at that member's times ``times[m]``."""
        del lrs  # the flow does not depend on the step size
        return _solve_at(loss_fn, model, list(times), self.rtol, self.atol, observables)


class ModifiedFlowReference(AbstractReference):
    """The modified-equation flow of GD at each member's η (one compile for all η)."""

    rtol: float = 1e-10
    atol: float = 1e-12
    name: ClassVar[str] = "modified"

    def hyperparams(self, lr: float) -> dict[str, float]:
        """GD at step η: ``{"learning_rate": η}``."""
        return {"learning_rate": lr}

    def solve(
        self,
        loss_fn: LossFn,
        model: Model,
        times: Sequence[Real[ArrayLike, " _S"]],
        lrs: RealVector,
        observables: Observables = None,
    ) -> list[Trajectory]:
        dtype = jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array))[0].dtype
        out = []
        for t, lr in zip(times, lrs):
            modified = ModifiedLoss(loss_fn, jnp.asarray(lr, dtype))
            (traj,) = _solve_at(modified, model, [t], self.rtol, self.atol, None)
            out.append(evaluate_along(traj, loss_fn, observables))
        return out
