"""Full-batch GD, Adam and AdamW of a text run in one compiled loop.

``gflow.run_optimizer`` compiles one program per optimizer and per (steps,
save_every); a text run needs GD and Adam from the same init (and, with ``--seeds``,
from several inits), and each compilation of a loop costs seconds to tens of seconds
on a busy 2-core machine. Here the method (GD, Adam or AdamW), the step size and its
schedule, the weight decay, the clipping threshold, the number of steps and the save
interval are all traced values, so every full-batch run of the same model shape,
number of saves and β₁ shares one compiled loop. The loop holds the loss gradient
only: it saves the loss, the gradient norm and parameter snapshots; text observables
are computed from the snapshots afterwards
(``gflow.text.observables.observe_snapshots``).

Step k is optax's ``chain(clip_by_global_norm(c), adamw(η, b1, weight_decay=λ))``
written out with traced switches: the gradient g is clipped to global norm c (c = 0:
off), the direction is Adam's (``scale_by_adam``) or g itself (GD), λ·params is
added (decoupled weight decay, AdamW only), and the update is −η_k times that.
Adam is then ``optax.adam``, GD ``optax.sgd``. The step size η_k is constant or
``warmup_cosine`` (peak η); the clock is t = Σ η_k (MODEL.md §5): k·η for a constant
step, the float64 cumulative sum of the schedule otherwise.
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
from gflow.dynamics.optimizers import SGD, Adam, AdamW
from gflow.dynamics.schedules import AbstractSchedule, Constant, warmup_cosine
from gflow.dynamics.trajectory import Trajectory
from gflow.dynamics.tree import tree_where

#: The update rules of the one compiled full-batch loop (``run_full_batch``).
FULL_BATCH_RULES = (SGD, Adam, AdamW)


def gd_or_adam(
    lr: Scalar,
    adaptive: Scalar,
    b1: float = 0.9,
    weight_decay: Scalar = 0.0,
    clip: Scalar = 0.0,
) -> optax.GradientTransformation:
    """``optax.chain(clip_by_global_norm(clip), adamw(lr, b1, weight_decay))`` when
    the traced flag ``adaptive`` > 0, else the same chain around ``optax.sgd(lr)``;
    ``clip`` = 0 drops the clipping, ``weight_decay`` = 0 the decay.

    Every branch runs and one is selected, so GD, Adam and AdamW share one compiled
    loop (all arguments but ``b1`` may be traced).
    """
    adam = optax.scale_by_adam(b1=b1)
    clipping = optax.clip_by_global_norm(clip)

    def update(grads, state, params=None):
        clipped, _ = clipping.update(grads, optax.EmptyState())
        grads = tree_where(clip > 0, clipped, grads)
        direction, state = adam.update(grads, state, params)
        direction = tree_where(adaptive > 0, direction, grads)
        decayed = jax.tree.map(lambda d, p: d + weight_decay * p, direction, params)
        direction = tree_where(weight_decay > 0, decayed, direction)
        return jax.tree.map(lambda d: -lr * d, direction), state

    return optax.GradientTransformation(adam.init, update)


@eqx.filter_jit
def _loop(params, static, loss_fn, hyper, steps, save_every, *, num_saves, b1):
    """Run ``steps`` steps (traced) and save at 0, e, 2e, ..., (n-1)e and ``steps``.

    ``hyper``: the traced (peak η, adaptive flag, weight decay, clip, warmup
    steps, final η) of ``run_full_batch``. Returns (loss [n+1], grad_norm
    [n+1], snapshots [n+1, ...], final params, diverged step or -1). Iteration
    k = steps only evaluates (no update), so the final save reuses the loop's one
    gradient.
    """
    lr, adaptive, weight_decay, clip, warmup, final = hyper

    def optimizer_at(k):
        # a constant step is the schedule with no warmup and final = lr: exactly lr
        eta = warmup_cosine(k, lr, warmup, steps, final)
        return gd_or_adam(eta, adaptive, b1, weight_decay, clip)

    dtype = jax.tree.leaves(params)[0].dtype
    n = num_saves

    def grad_of(p):
        return jax.value_and_grad(lambda q: loss_fn(eqx.combine(q, static)))(p)

    def body(k, carry):
        p, s, losses, norms, snaps, bad_at = carry
        frozen = bad_at >= 0
        snap = p
        p, s, bad_at, loss, g = guarded_step(
            grad_of, optimizer_at(k), p, s, bad_at, k, active=k < steps
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
        optimizer_at(0).init(params),
        jnp.full(n + 1, jnp.nan, dtype),
        jnp.full(n + 1, jnp.nan, dtype),
        snaps,
        jnp.asarray(-1, jnp.int32),
    )
    p, _, losses, norms, snaps, bad_at = jax.lax.fori_loop(0, steps + 1, body, carry)
    return losses, norms, snaps, p, bad_at


def _checked(
    optimizer, learning_rate, steps, num_saves, clip
) -> tuple[AbstractSchedule, int, int]:
    """The schedule, number of saves n and save interval of a full-batch run,
    after checking its settings (ValueError in one line)."""
    if not isinstance(optimizer, FULL_BATCH_RULES):
        raise ValueError(
            f"optimizer must be gflow's SGD(), Adam() or AdamW(), got {optimizer!r}"
        )
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if not isinstance(num_saves, (int, np.integer)) or num_saves < 1:
        raise ValueError(f"num_saves must be a positive integer, got {num_saves!r}")
    schedule = (
        learning_rate
        if isinstance(learning_rate, AbstractSchedule)
        else Constant(learning_rate, steps)
    )
    if not schedule.peak > 0:
        raise ValueError(f"learning_rate must be > 0, got {schedule.peak}")
    if not 0 <= schedule.warmup < steps:
        raise ValueError(
            f"warmup must be an integer in [0, steps), got {schedule.warmup!r}"
        )
    if not schedule.final >= 0 or not clip >= 0:
        raise ValueError(
            f"final_lr and clip must be >= 0, got {schedule.final}, {clip}"
        )
    n = min(int(num_saves), int(steps))
    return schedule, n, max(1, steps // n)


def _weight_decay(optimizer) -> float:
    return optimizer.weight_decay if isinstance(optimizer, AdamW) else 0.0


def full_batch_arrays(
    loss_fn: LossFn,
    model: Model,
    *,
    optimizer: SGD | Adam | AdamW,
    learning_rate: float | AbstractSchedule,
    steps: int,
    num_saves: int,
    clip: float = 0.0,
) -> tuple:
    """The saves of ``run_full_batch`` as JAX arrays, before any host-side work.

    The same compiled loop and the same arguments as ``run_full_batch``, but
    nothing is read back to the host or turned into a ``Trajectory``, so the call
    can sit inside a JAX transformation: ``jax.vmap`` over a batch of initial
    models (as ``benchmarks/text_seeds.py`` does to time K seeds at once), or
    ``jax.jit``. ``model``'s arrays may be traced; the settings may not.

    Returns:
        ``(loss, grad_norm, params, final, diverged_step)``: the loss and the
        gradient norm at the n + 1 saves ([n + 1] each; n = min(num_saves,
        steps), saves at steps 0, e, ..., (n-1)·e and ``steps`` with
        e = max(1, steps // n); NaN from a divergence on), the inexact arrays of
        the model at the saves (time-stacked, as ``eqx.partition(model,
        eqx.is_inexact_array)[0]``), those of the final model, and the step at
        which the run diverged (-1: it did not). ``run_full_batch`` documents
        the settings.
    """
    schedule, n, every = _checked(optimizer, learning_rate, steps, num_saves, clip)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    dtype = jax.tree.leaves(params)[0].dtype
    hyper = (
        jnp.asarray(schedule.peak, dtype),
        jnp.asarray(float(isinstance(optimizer, (Adam, AdamW))), dtype),
        jnp.asarray(_weight_decay(optimizer), dtype),
        jnp.asarray(clip, dtype),
        jnp.asarray(schedule.warmup, jnp.int32),
        jnp.asarray(schedule.final, dtype),
    )
    return _loop(
        params,
        static,
        loss_fn,
        hyper,
        jnp.asarray(steps, jnp.int32),
        jnp.asarray(every, jnp.int32),
        num_saves=n,
        b1=optimizer.beta if isinstance(optimizer, (Adam, AdamW)) else 0.9,
    )


def run_full_batch(
    loss_fn: LossFn,
    model: Model,
    *,
    optimizer: SGD | Adam | AdamW,
    learning_rate: float | AbstractSchedule,
    steps: int,
    num_saves: int,
    clip: float = 0.0,
) -> Trajectory:
    """Full-batch GD, Adam or AdamW with parameter snapshots, on the flow clock
    t = Σ η_k.

    Args:
        loss_fn: ``loss_fn(model) -> scalar`` (e.g. ``TextLoss``).
        model: initial model.
        optimizer: ``SGD()`` (``optax.sgd``), ``Adam(beta=β₁)`` (``optax.adam``) or
            ``AdamW(beta=β₁, weight_decay=λ)`` (``optax.adamw``), from
            ``gflow.dynamics.optimizers``.
        learning_rate: the step size η (traced), or a schedule
            (``gflow.dynamics.Constant``, ``WarmupCosine``) whose four numbers are
            traced: every schedule shares the compiled loop.
        steps: number of steps (traced); a schedule's ``total`` should equal it.
        num_saves: saves at steps 0, e, ..., (num_saves-1)·e with
            e = max(1, steps // num_saves), and at ``steps`` (static: the shape of
            the outputs).
        clip: clip the gradient to this global norm before the optimizer (0: off).

    Returns:
        A Trajectory with ``loss``, ``grad_norm`` and ``params`` (time-stacked) at
        the saves; status ``"diverged"`` with ``stats["diverged_step"]`` if the loss
        or gradient became non-finite or |params| > 1e8 (later saves are NaN).
        ``full_batch_arrays`` gives the same saves as JAX arrays, for use inside
        a transformation.
    """
    schedule, n, every = _checked(optimizer, learning_rate, steps, num_saves, clip)
    weight_decay = _weight_decay(optimizer)
    static = eqx.partition(model, eqx.is_inexact_array)[1]
    losses, norms, snaps, final, bad_at = full_batch_arrays(
        loss_fn,
        model,
        optimizer=optimizer,
        learning_rate=learning_rate,
        steps=steps,
        num_saves=num_saves,
        clip=clip,
    )
    k = np.append(np.arange(n) * every, steps)
    bad_at = int(bad_at)
    stats = {"steps": int(steps), "save_every": every, "grad_evals": int(steps) + 1}
    if bad_at >= 0:
        stats["diverged_step"] = bad_at
    k = np.minimum(k, steps if bad_at < 0 else bad_at)
    t = schedule.clock(k)
    return Trajectory(
        t=t,
        metrics={"loss": np.asarray(losses), "grad_norm": np.asarray(norms)},
        final=eqx.combine(final, static),
        params=eqx.combine(snaps, static),
        status="diverged" if bad_at >= 0 else "success",
        stats=stats,
        info={
            "kind": "optimizer",
            "method": _METHODS[type(optimizer)],
            "learning_rate": float(schedule.peak),
            "steps": int(steps),
            "schedule": schedule.name,
            "warmup_steps": int(schedule.warmup),
            "final_lr": float(schedule.final),
            "weight_decay": float(weight_decay),
            "clip": float(clip),
        },
    )


_METHODS = {SGD: "gd", Adam: "adam", AdamW: "adamw"}
