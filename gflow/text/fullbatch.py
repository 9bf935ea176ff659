"""Full-batch GD and Adam of a text run in one compiled loop.

``gflow.run_optimizer`` compiles one program per optimizer and per (steps,
save_every); a text run needs GD and Adam from the same init, and each compilation
of a loop costs 10-30 s on a busy 2-core machine. Here the method (GD or Adam), the
step size, the number of steps and the save interval are all traced values, so GD,
Adam and any other run of the same model shape and number of saves share one
compiled loop. The loop holds the loss gradient only: it saves the loss, the
gradient norm and parameter snapshots; text observables are computed from the
snapshots afterwards (``gflow.text.observables.observe_snapshots``).

Adam is ``optax.adam(lr)`` (``scale_by_adam`` then ``-lr``); GD is ``optax.sgd(lr)``.
Both advance the flow clock by ``lr`` per step (MODEL.md §5).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Scalar

from gflow.array_types import LossFn, Model
from gflow.dynamics.optimizer_step import guarded_step
from gflow.dynamics.optimizers import SGD, Adam
from gflow.dynamics.trajectory import Trajectory
from gflow.dynamics.tree import tree_where


def gd_or_adam(
    lr: Scalar, adaptive: Scalar, b1: float = 0.9
) -> optax.GradientTransformation:
    """``optax.adam(lr, b1)`` when the traced flag ``adaptive`` > 0, else
    ``optax.sgd(lr)``.

    Both branches run and one is selected, so GD and Adam share one compiled loop.
    """
    adam = optax.scale_by_adam(b1=b1)

    def update(grads, state, params=None):
        direction, state = adam.update(grads, state, params)
        direction = tree_where(adaptive > 0, direction, grads)
        return jax.tree.map(lambda d: -lr * d, direction), state

    return optax.GradientTransformation(adam.init, update)


@eqx.filter_jit
def _loop(params, static, loss_fn, lr, adaptive, steps, save_every, *, num_saves, b1):
    """Run ``steps`` steps (traced) and save at 0, e, 2e, ..., (n-1)e and ``steps``.

    Returns (loss [n+1], grad_norm [n+1], snapshots [n+1, ...], final params,
    diverged step or -1). Iteration k = steps only evaluates (no update), so the
    final save reuses the loop's one gradient.
    """
    optimizer = gd_or_adam(lr, adaptive, b1)
    dtype = jax.tree.leaves(params)[0].dtype
    n = num_saves

    def grad_of(p):
        return jax.value_and_grad(lambda q: loss_fn(eqx.combine(q, static)))(p)

    def body(k, carry):
        p, s, losses, norms, snaps, bad_at = carry
        frozen = bad_at >= 0
        snap = p
        p, s, bad_at, loss, g = guarded_step(
            grad_of, optimizer, p, s, bad_at, k, active=k < steps
        )
        sq = sum(jnp.sum(x**2) for x in jax.tree.leaves(g))
        # Where k is saved: k = j·e for j < n, and the last iteration (k = steps).
        j = jnp.where(k == steps, n, k // save_every)
        save = (k == steps) | ((k % save_every == 0) & (j < n))
        nan = jnp.asarray(jnp.nan, dtype)
        rec_loss = jnp.where(frozen, nan, loss)
        rec_norm = jnp.where(frozen, nan, jnp.sqrt(sq))
        losses = losses.at[j].set(jnp.where(save, rec_loss, losses[j]))
        norms = norms.at[j].set(jnp.where(save, rec_norm, norms[j]))
        snaps = jax.tree.map(
            lambda b, x: b.at[j].set(jnp.where(save, x, b[j])), snaps, snap
        )
        return p, s, losses, norms, snaps, bad_at

    snaps = jax.tree.map(lambda x: jnp.zeros((n + 1, *x.shape), x.dtype), params)
    carry = (
        params,
        optimizer.init(params),
        jnp.full(n + 1, jnp.nan, dtype),
        jnp.full(n + 1, jnp.nan, dtype),
        snaps,
        jnp.asarray(-1, jnp.int32),
    )
    p, _, losses, norms, snaps, bad_at = jax.lax.fori_loop(0, steps + 1, body, carry)
    return losses, norms, snaps, p, bad_at


def run_full_batch(
    loss_fn: LossFn,
    model: Model,
    *,
    optimizer: SGD | Adam,
    learning_rate: float,
    steps: int,
    num_saves: int,
) -> Trajectory:
    """Full-batch GD or Adam with parameter snapshots, on the flow clock t_k = k·η.

    Args:
        loss_fn: ``loss_fn(model) -> scalar`` (e.g. ``TextLoss``).
        model: initial model.
        optimizer: ``SGD()`` (``optax.sgd``) or ``Adam(beta=β₁)`` (``optax.adam``),
            from ``gflow.dynamics.optimizers``.
        learning_rate: the constant step size η (traced).
        steps: number of steps (traced).
        num_saves: saves at steps 0, e, ..., (num_saves-1)·e with
            e = max(1, steps // num_saves), and at ``steps`` (static: the shape of
            the outputs).

    Returns:
        A Trajectory with ``loss``, ``grad_norm`` and ``params`` (time-stacked) at
        the saves; status ``"diverged"`` with ``stats["diverged_step"]`` if the loss
        or gradient became non-finite or |params| > 1e8 (later saves are NaN).
    """
    if not isinstance(optimizer, (SGD, Adam)):
        raise ValueError(
            f"optimizer must be gflow's SGD() or Adam(), got {optimizer!r}"
        )
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if not isinstance(num_saves, (int, np.integer)) or num_saves < 1:
        raise ValueError(f"num_saves must be a positive integer, got {num_saves!r}")
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate}")
    n = min(int(num_saves), int(steps))
    every = max(1, steps // n)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    dtype = jax.tree.leaves(params)[0].dtype
    losses, norms, snaps, final, bad_at = _loop(
        params,
        static,
        loss_fn,
        jnp.asarray(learning_rate, dtype),
        jnp.asarray(float(isinstance(optimizer, Adam)), dtype),
        jnp.asarray(steps, jnp.int32),
        jnp.asarray(every, jnp.int32),
        num_saves=n,
        b1=optimizer.beta if isinstance(optimizer, Adam) else 0.9,
    )
    k = np.append(np.arange(n) * every, steps)
    bad_at = int(bad_at)
    stats = {"steps": int(steps), "save_every": every, "grad_evals": int(steps) + 1}
    if bad_at >= 0:
        stats["diverged_step"] = bad_at
    return Trajectory(
        t=np.minimum(k, steps if bad_at < 0 else bad_at) * float(learning_rate),
        metrics={"loss": np.asarray(losses), "grad_norm": np.asarray(norms)},
        final=eqx.combine(final, static),
        params=eqx.combine(snaps, static),
        status="diverged" if bad_at >= 0 else "success",
        stats=stats,
        info={
            "kind": "optimizer",
            "method": "adam" if isinstance(optimizer, Adam) else "gd",
            "learning_rate": float(learning_rate),
            "steps": int(steps),
        },
    )
