"""One Trajectory type for flow and optimizer runs, and distances between runs."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, get_args

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PyTree, Real

from gflow.dynamics.solvers.stall import StallReport

#: How a flow or an optimizer run ended: it reached t1 (``success``), ran out of
#: its step budget (``max_steps``), left the finite numbers (``diverged``), or the
#: solver gave up for another reason (``failed``).
Status = Literal["success", "max_steps", "diverged", "failed"]

#: The values of ``Status``, in its order.
STATUSES: tuple[Status, ...] = get_args(Status)


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """A run recorded at saved times on the shared flow clock.

    Attributes:
        t: saved times, float [n]. For an optimizer, t_k = Σ_{i<k} η_i.
        metrics: name -> array [n, ...]; always holds ``"loss"``.
        final: the model at the end of the run (at the last valid time).
        params: the model with a leading time axis [n, ...] on every array, or None
            when snapshots were not asked for.
        status: how the run ended, a ``Status`` (one of ``STATUSES``).
        stats: solver or optimizer statistics (steps, gradient evaluations, ...).
        info: what produced the run (solver or optimizer, tolerances, step sizes).
        diagnosis: for a flow that stopped before t1 (``max_steps``, ``failed``),
            where and why, with the options to try (``StallReport.message``).
    """

    t: Real[np.ndarray, " n"]
    metrics: dict[str, np.ndarray]
    final: PyTree
    params: PyTree = None
    status: Status = "success"
    stats: dict[str, Any] = dataclasses.field(default_factory=dict)
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    diagnosis: StallReport | None = None

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if "loss" not in self.metrics:
            raise ValueError("metrics must hold 'loss'")

    def __len__(self) -> int:
        return int(self.t.shape[0])

    @property
    def ok(self) -> bool:
        return self.status == "success"

    def snapshot(self, i: int) -> PyTree:
        """The model saved at index ``i`` (needs ``params``)."""
        if self.params is None:
            raise ValueError(
                "this trajectory has no parameter snapshots; run it with "
                "save_params=True"
            )
        return jax.tree.map(lambda x: x[i] if eqx.is_array(x) else x, self.params)


def _blocks(model) -> dict[str, jax.Array]:
    """The design card's blocks (W_E, W_P, W_A) of a model, or its leaves otherwise."""
    if all(hasattr(model, name) for name in ("W_E", "W_P", "W_A")):
        return {"W_E": model.W_E, "W_P": model.W_P, "W_A": model.W_A}
    leaves = jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array))
    return {f"leaf{i}": x for i, x in enumerate(leaves)}


def _model_distance(a, b) -> dict[str, jax.Array]:
    pa = eqx.filter(a, eqx.is_inexact_array)
    pb = eqx.filter(b, eqx.is_inexact_array)
    sq = jax.tree.map(lambda x, y: jnp.sum((x - y) ** 2), pa, pb)
    out = {"total": jnp.sqrt(sum(jax.tree.leaves(sq)))}
    ba, bb = _blocks(a), _blocks(b)
    for name in ba:
        out[name] = jnp.linalg.norm((ba[name] - bb[name]).ravel())
    return out


def parameter_distance(
    a: Trajectory, b: Trajectory, *, rtol: float = 1e-6
) -> dict[str, Real[np.ndarray, " n"]]:
    """Euclidean distances between two runs at their common saved times.

    Both runs need parameter snapshots at the same times (solve the flow with
    ``ts=optimizer_run.t`` and ``save_params=True``).

    Returns:
        dict with ``"t"`` [n] and, each [n], ``"total"`` over all parameters and one
        entry per block (W_E, W_P, W_A = W_Q W_Kᵀ for the attention model).
    """
    if a.params is None or b.params is None:
        raise ValueError(
            "both trajectories need parameter snapshots (save_params=True)"
        )
    n = min(len(a), len(b))
    if not np.allclose(a.t[:n], b.t[:n], rtol=rtol, atol=1e-12):
        raise ValueError(
            "the trajectories were saved at different times; solve the "
            "flow with ts=<the other run's t>"
        )
    dist = jax.vmap(_model_distance)(
        jax.tree.map(lambda x: x[:n] if eqx.is_array(x) else x, a.params),
        jax.tree.map(lambda x: x[:n] if eqx.is_array(x) else x, b.params),
    )
    return {"t": a.t[:n], **{k: np.asarray(v) for k, v in dist.items()}}
