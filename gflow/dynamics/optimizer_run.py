"""Discrete optax runs on the flow clock t_k = Σ_{i<k} η_i, in one ``lax.scan``."""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, ArrayLike, Float, Int, PyTree, Real, Scalar

from gflow.array_types import LossFn, Model, Observables
from gflow.dynamics.metrics import evaluate_metrics
from gflow.dynamics.optimizer_step import DEFAULT_BLOWUP, guarded_step
from gflow.dynamics.trajectory import Trajectory


def _hyperparam_states(state) -> list:
    """Every ``inject_hyperparams`` state inside an optax state, outermost first."""
    found = []

    def visit(node):
        if hasattr(node, "hyperparams") and isinstance(node.hyperparams, dict):
            found.append(node)
            visit(getattr(node, "inner_state", None))
        elif isinstance(node, (tuple, list)):
            for child in node:
                visit(child)

    visit(state)
    return found


def has_injected_learning_rate(state: PyTree) -> bool:
    """Whether an optax state holds a ``learning_rate`` from ``inject_hyperparams``."""
    return any("learning_rate" in s.hyperparams for s in _hyperparam_states(state))


def injected_learning_rate(state: PyTree) -> Real[ArrayLike, "..."]:
    """The ``learning_rate`` stored by ``inject_hyperparams`` (the last one used)."""
    for s in _hyperparam_states(state):
        if "learning_rate" in s.hyperparams:
            return s.hyperparams["learning_rate"]
    raise ValueError("the optimizer state has no injected learning_rate")


class StepClock(eqx.Module):
    """The step size η_k that advances the flow clock at step k.

    ``learning_rate`` is None (read the one ``inject_hyperparams`` stored in the state
    after the update: the one that update used), a number, or a schedule
    ``step -> η`` (an optax schedule).
    """

    learning_rate: object = None

    def __call__(self, step: Int[Array, ""], new_state: PyTree) -> Real[ArrayLike, ""]:
        if self.learning_rate is None:
            return injected_learning_rate(new_state)
        if callable(self.learning_rate):
            return self.learning_rate(step)
        return self.learning_rate


@eqx.filter_jit
def run_core(
    params: PyTree,
    static: PyTree,
    opt_state: PyTree,
    loss_fn: LossFn,
    optimizer: optax.GradientTransformation,
    clock: Callable[[Int[Array, ""], PyTree], Real[ArrayLike, ""]],
    observables: Observables,
    *,
    steps: int,
    save_every: int,
    save_params: bool,
    blowup: float | Scalar,
) -> tuple[Float[Array, " n"], dict[str, Array], PyTree | None, PyTree, Int[Array, ""]]:
    """The jitted optimizer loop; pure, so it can be vmapped over ``opt_state``.

    Returns (times [n], metrics {name: [n, ...]}, params snapshots or None,
    final params, diverged step (−1 if none)). Saves are at steps 0, save_every,
    2·save_every, ... and at ``steps``. After a divergence the parameters stop
    moving and later saves are NaN.
    """
    dtype = jax.tree.leaves(params)[0].dtype

    def loss_of(p):
        return loss_fn(eqx.combine(p, static))

    def step(carry, _):
        p, s, t, k, bad_at = carry
        p, s, bad_at, _, _ = guarded_step(
            jax.value_and_grad(loss_of), optimizer, p, s, bad_at, k, blowup=blowup
        )
        eta = jnp.asarray(clock(k, s), dtype)
        t = jnp.where(bad_at >= 0, t, t + eta)
        return (p, s, t, k + 1, bad_at), None

    def record(p, t, bad_at):
        metrics = evaluate_metrics(loss_fn, observables, eqx.combine(p, static))
        nan = jnp.asarray(jnp.nan, dtype)
        metrics = jax.tree.map(lambda x: jnp.where(bad_at >= 0, nan, x), metrics)
        return t, metrics, (p if save_params else None)

    def chunk(carry, _):
        rec = record(carry[0], carry[2], carry[4])
        carry, _ = jax.lax.scan(step, carry, None, length=save_every)
        return carry, rec

    carry = (
        params,
        opt_state,
        jnp.zeros((), dtype),
        jnp.zeros((), jnp.int32),
        jnp.asarray(-1, jnp.int32),
    )
    n_chunks, rest = divmod(steps, save_every)
    carry, recs = jax.lax.scan(chunk, carry, None, length=n_chunks)
    tail = [record(carry[0], carry[2], carry[4])]  # at step n_chunks * save_every
    if rest:
        carry, _ = jax.lax.scan(step, carry, None, length=rest)
        tail.append(record(carry[0], carry[2], carry[4]))
    times, metrics, snaps = jax.tree.map(
        lambda a, *b: jnp.concatenate([a, jnp.stack(b)]), recs, *tail
    )
    return times, metrics, snaps, carry[0], carry[4]


def run_optimizer(
    loss_fn: LossFn,
    model: Model,
    optimizer: optax.GradientTransformation,
    *,
    steps: int,
    save_every: int | None = None,
    learning_rate: float | Callable | None = None,
    observables: Observables = None,
    save_params: bool = False,
    blowup: float = DEFAULT_BLOWUP,
    opt_state: PyTree | None = None,
) -> Trajectory:
    """Run an optax optimizer for ``steps`` steps on the shared flow clock.

    The clock advances by the step size η_k of every step, so a run sits at flow time
    t_k = Σ_{i<k} η_i after k steps (MODEL.md §5). The step size is read from the
    optimizer state when it was built with ``optax.inject_hyperparams`` (schedules
    included); otherwise pass ``learning_rate=`` (a number or a schedule step -> η).
    For Adam and other adaptive methods the clock is the learning rate: one step of
    Adam advances time by η, which is the time of its sign-like ODE limit.

    Args:
        loss_fn: ``loss_fn(model) -> scalar``.
        model: initial model.
        optimizer: any optax GradientTransformation.
        steps: number of optimizer steps (>= 1).
        save_every: record metrics every this many steps (default: about 200 saves).
        learning_rate: the clock's step size when the optimizer has no injected one.
        observables: as in ``solve_flow``.
        save_params: also keep the parameters at the saved steps.
        blowup: a parameter norm above this counts as divergence.
        opt_state: a starting optimizer state (default ``optimizer.init``).

    Returns:
        A Trajectory; status ``"diverged"`` with ``stats["diverged_step"]`` and
        ``stats["diverged_time"]`` if the loss, gradient or parameters became
        non-finite or blew up (saves after that are NaN).
    """
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    save_every = max(1, steps // 200) if save_every is None else save_every
    if not isinstance(save_every, (int, np.integer)) or save_every < 1:
        raise ValueError(f"save_every must be a positive integer, got {save_every!r}")
    save_every = min(int(save_every), int(steps))
    params, static = eqx.partition(model, eqx.is_inexact_array)
    opt_state = optimizer.init(params) if opt_state is None else opt_state
    if learning_rate is None and not has_injected_learning_rate(opt_state):
        raise ValueError(
            "cannot read the step size for the flow clock: build the optimizer with "
            "optax.inject_hyperparams(...)(learning_rate=...) or pass learning_rate="
        )
    if isinstance(learning_rate, (int, float)) and not learning_rate > 0:
        raise ValueError(f"learning_rate must be positive, got {learning_rate}")
    if learning_rate is None:
        eta = injected_learning_rate(opt_state)
        if not isinstance(eta, jax.core.Tracer) and not np.all(np.asarray(eta) > 0):
            raise ValueError(
                f"the optimizer's learning_rate must be positive, got {np.asarray(eta)}"
            )
    times, metrics, snaps, final, bad_at = run_core(
        params,
        static,
        opt_state,
        loss_fn,
        optimizer,
        StepClock(learning_rate),
        observables,
        steps=int(steps),
        save_every=save_every,
        save_params=save_params,
        blowup=blowup,
    )
    times = np.asarray(times)
    bad_at = int(bad_at)
    stats = {
        "steps": int(steps),
        "save_every": save_every,
        "grad_evals": int(steps) + 2 * len(times),
    }
    if bad_at >= 0:
        stats["diverged_step"] = bad_at
        stats["diverged_time"] = float(times[-1])  # the clock stops at the bad step
    return Trajectory(
        t=times,
        metrics={k: np.asarray(v) for k, v in metrics.items()},
        final=eqx.combine(final, static),
        params=None if snaps is None else eqx.combine(snaps, static),
        status="diverged" if bad_at >= 0 else "success",
        stats=stats,
        info={"kind": "optimizer", "steps": int(steps)},
    )
