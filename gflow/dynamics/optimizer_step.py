"""One guarded optimizer step: the core that every discrete optimizer loop shares.

A step evaluates the loss and its gradient, applies the optax update, and checks the
result: a non-finite loss or gradient, or a parameter norm above ``blowup``, marks
the run diverged at that step. From then on the parameters and the optimizer state
stay frozen at their last good values, so a diverged member of a vmapped sweep never
feeds NaN into the others and its last good state can be inspected.

The loops around it differ only in when they record (``gflow.dynamics.optimizer_run``
scans in chunks, ``gflow.dynamics.sweep`` walks each member to its own save steps,
``gflow.text.fullbatch`` and ``gflow.text.train`` drive text runs).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Bool, Int, PyTree, Scalar

from gflow.dynamics.tree import tree_norm, tree_where

#: A parameter norm above this counts as divergence unless a run says otherwise.
DEFAULT_BLOWUP = 1e8


def diverged(
    loss: Scalar, grads: PyTree, params: PyTree, blowup: float | Scalar
) -> Bool[Array, ""]:
    """Whether a step went bad: non-finite loss or gradient, or |params| > blowup."""
    finite = jnp.isfinite(loss)
    for g in jax.tree.leaves(grads):
        finite &= jnp.all(jnp.isfinite(g))
    return ~finite | (tree_norm(params) > blowup)


def guarded_step(
    value_and_grad: Callable[[PyTree], tuple[Scalar, PyTree]],
    optimizer: optax.GradientTransformation,
    params: PyTree,
    opt_state: PyTree,
    diverged_at: Int[Array, ""],
    k: Int[Array, ""],
    *,
    blowup: float | Scalar = DEFAULT_BLOWUP,
    active: Bool[Array, ""] | bool = True,
) -> tuple[PyTree, PyTree, Int[Array, ""], Scalar, PyTree]:
    """Step ``k`` of ``optimizer``, frozen once the run has diverged.

    Args:
        value_and_grad: ``params -> (loss, grads)`` at the current step (a minibatch
            loop closes over its batch here).
        optimizer: the optax transformation.
        params, opt_state: the current parameters and optimizer state.
        diverged_at: the step at which the run diverged, −1 while it has not.
        k: this step's index, recorded in ``diverged_at`` if this step goes bad.
        blowup: a parameter norm above this counts as divergence.
        active: False makes this an evaluation only (no update, no check), for
            loops whose trip count is traced.

    Returns:
        (params, opt_state, diverged_at, loss, grads): the new state (the old one if
        the run is or becomes diverged, or the step is inactive), and the loss and
        gradient evaluated at the old parameters.
    """
    loss, grads = value_and_grad(params)
    updates, new_state = optimizer.update(grads, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    bad = diverged(loss, grads, new_params, blowup) & (diverged_at < 0) & active
    diverged_at = jnp.where(bad, k, diverged_at)
    keep = (diverged_at >= 0) | ~jnp.asarray(active)
    params = tree_where(keep, params, new_params)
    opt_state = tree_where(keep, opt_state, new_state)
    return params, opt_state, diverged_at, loss, grads
