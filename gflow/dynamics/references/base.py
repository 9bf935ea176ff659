"""The reference a discrete optimizer run is compared with: one abstract strategy.

A reference turns a loss, an initial model and the members' times into one
Trajectory per member, with parameter snapshots at exactly those times and the
*original* loss as its ``"loss"`` metric. The concrete references are final
(Equinox's abstract/final pattern): ``FlowReference`` and ``ModifiedFlowReference``
in ``gflow.dynamics.references.flow``, ``MomentumODEReference`` and
``AdamODEReference`` in ``gflow.dynamics.references.optimizer_odes``.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence

import equinox as eqx
import jax
import numpy as np
from jaxtyping import ArrayLike, Float, Real

from gflow.array_types import LossFn, Model, Observables, RealVector
from gflow.dynamics.metrics import evaluate_metrics
from gflow.dynamics.trajectory import Trajectory


class AbstractReference(eqx.Module):
    """A continuous-time trajectory that members of a sweep are compared with.

    Attributes:
        name: the reference's name in sweep.json and the CLI.
    """

    name: eqx.AbstractClassVar[str]

    @abc.abstractmethod
    def solve(
        self,
        loss_fn: LossFn,
        model: Model,
        times: Sequence[Real[ArrayLike, " _S"]],
        lrs: RealVector,
        observables: Observables = None,
    ) -> list[Trajectory]:
        """One Trajectory per member m, saved at that member's times ``times[m]``.

        Args:
            loss_fn: ``loss_fn(model) -> scalar``.
            model: the initial model, shared by all members.
            times: the members' saved times, a list of float [S_m].
            lrs: the members' step sizes η_m, float [M] (references that depend on
                η, such as the modified flow, solve once per member).
            observables: recorded along each returned Trajectory.
        """

    def check_start(self, loss_fn: LossFn, model: Model, lr: float) -> None:
        """Raise ValueError if this reference cannot describe a member of step
        ``lr`` started at ``model`` (cheap; called before anything long runs)."""

    @abc.abstractmethod
    def hyperparams(self, lr: float) -> dict[str, float]:
        """The injected optimizer values of a member of step η that this reference is
        the limit of (``run_sweep(..., hyperparams=reference.hyperparams)``)."""


@eqx.filter_jit
def _metrics_along(loss_fn, observables, snaps):
    return jax.vmap(lambda m: evaluate_metrics(loss_fn, observables, m))(snaps)


def evaluate_along(
    traj: Trajectory, loss_fn: LossFn, observables: Observables = None
) -> Trajectory:
    """``traj`` with its metrics recomputed from its snapshots under ``loss_fn``."""
    if traj.params is None:
        raise ValueError("evaluate_along needs parameter snapshots (save_params=True)")
    params, static = eqx.partition(traj.params, eqx.is_array)
    metrics = _metrics_along(loss_fn, observables, eqx.combine(params, static))
    return dataclasses.replace(
        traj, metrics={k: np.asarray(v) for k, v in metrics.items()}
    )


def at_times(
    traj: Trajectory, union: Float[np.ndarray, " n"], t: Real[ArrayLike, " S"]
) -> Trajectory:
    """``traj``, saved at ``union_times(...)``, restricted to a member's times ``t``."""
    idx = np.clip(np.searchsorted(union, np.asarray(t) - 1e-9), 0, len(union) - 1)
    params = jax.tree.map(lambda x: x[idx] if eqx.is_array(x) else x, traj.params)
    return dataclasses.replace(
        traj,
        t=np.asarray(t, float),
        metrics={k: np.asarray(v)[idx] for k, v in traj.metrics.items()},
        params=params,
    )


def union_times(times: Sequence[Real[ArrayLike, " _S"]]) -> Float[np.ndarray, " n"]:
    """The sorted union of the members' times, float [n].

    k·η from different members may differ by round-off; such times are merged.
    """
    allt = np.sort(np.concatenate([np.asarray(t, float) for t in times]))
    keep = np.concatenate([[True], np.diff(allt) > 1e-9 * max(1.0, allt[-1])])
    return allt[keep]
