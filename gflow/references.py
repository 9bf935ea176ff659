"""Reference trajectories a discrete optimizer is compared with, as strategy objects.

- ``FlowReference``: the gradient flow dθ/dt = −∇L, solved once in float64 at the
  union of all members' times and reused by every member. GD approaches it at order 1.
- ``ModifiedFlowReference``: the modified-equation flow dθ/dt = −∇(L + (η/4)|∇L|²),
  one solve per η (η is traced: one compilation). GD approaches it at order 2 while
  ηλ_max stays well below 2.

Every reference gives, for member times ``t`` [S], a Trajectory with parameter
snapshots at exactly those times and the *original* loss as its ``"loss"`` metric.
The momentum and Adam ODEs are in ``gflow.optimizer_odes``.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from .flow import solve_flow
from .observables import evaluate_metrics
from .trajectory import Trajectory


class ModifiedLoss(eqx.Module):
    """L̃ = L + (η/4)|∇L|²: the loss whose flow GD follows to second order in η."""

    loss_fn: object
    eta: Array

    def __call__(self, model):
        loss, grads = eqx.filter_value_and_grad(self.loss_fn)(model)
        sq = sum(jnp.sum(g**2) for g in jax.tree.leaves(grads))
        return loss + 0.25 * self.eta * sq


@eqx.filter_jit
def _metrics_along(loss_fn, observables, snaps):
    return jax.vmap(lambda m: evaluate_metrics(loss_fn, observables, m))(snaps)


def evaluate_along(traj: Trajectory, loss_fn, observables=None) -> Trajectory:
    """``traj`` with its metrics recomputed from its snapshots under ``loss_fn``."""
    if traj.params is None:
        raise ValueError("evaluate_along needs parameter snapshots (save_params=True)")
    params, static = eqx.partition(traj.params, eqx.is_array)
    metrics = _metrics_along(loss_fn, observables, eqx.combine(params, static))
    return dataclasses.replace(
        traj, metrics={k: np.asarray(v) for k, v in metrics.items()}
    )


def _select(traj: Trajectory, idx: np.ndarray, t: np.ndarray) -> Trajectory:
    params = jax.tree.map(lambda x: x[idx] if eqx.is_array(x) else x, traj.params)
    return dataclasses.replace(
        traj,
        t=np.asarray(t, float),
        metrics={k: np.asarray(v)[idx] for k, v in traj.metrics.items()},
        params=params,
    )


def _union(times: list[np.ndarray]) -> np.ndarray:
    # k·η from different members may differ by round-off; merge them
    allt = np.sort(np.concatenate([np.asarray(t, float) for t in times]))
    keep = np.concatenate([[True], np.diff(allt) > 1e-9 * max(1.0, allt[-1])])
    return allt[keep]


def _solve_at(loss_fn, model, times, rtol, atol, observables) -> list[Trajectory]:
    union = _union(times)
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
    out = []
    for t in times:
        idx = np.clip(np.searchsorted(union, np.asarray(t) - 1e-9), 0, len(union) - 1)
        out.append(_select(traj, idx, t))
    return out


@dataclasses.dataclass(frozen=True)
class FlowReference:
    """The gradient flow, one float64 solve shared by every member."""

    rtol: float = 1e-10
    atol: float = 1e-12
    name = "flow"

    def solve(self, loss_fn, model, times, lrs, observables=None) -> list[Trajectory]:
        """One Trajectory per member, at that member's times ``times[m]``."""
        del lrs  # the flow does not depend on the step size
        return _solve_at(loss_fn, model, list(times), self.rtol, self.atol, observables)


@dataclasses.dataclass(frozen=True)
class ModifiedFlowReference:
    """The modified-equation flow of GD at each member's η (one compile for all η)."""

    rtol: float = 1e-10
    atol: float = 1e-12
    name = "modified"

    def solve(self, loss_fn, model, times, lrs, observables=None) -> list[Trajectory]:
        dtype = jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array))[0].dtype
        out = []
        for t, lr in zip(times, lrs):
            modified = ModifiedLoss(loss_fn, jnp.asarray(lr, dtype))
            (traj,) = _solve_at(modified, model, [t], self.rtol, self.atol, None)
            out.append(evaluate_along(traj, loss_fn, observables))
        return out
