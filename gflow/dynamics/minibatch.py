"""Optimizer runs on fresh minibatches: every step draws a batch from a stream.

``run_optimizer`` moves a model on one fixed loss; here step k draws a batch
``stream(key_k)`` and takes one optimizer step on ``batch_loss(model, batch)``,
while the recorded loss and observables use a fixed evaluation loss (a held sample,
or the population loss), so runs with and without minibatch noise share their
metrics and can be compared on the shared clock t = Σ η_k (MODEL.md §5). The step
size may follow a schedule; the clock then sums the schedule.

The step is ``gflow.dynamics.optimizer_step.guarded_step``: a divergence freezes the
run at its last good state and the later saves are NaN. ``minibatch_segment`` runs
one piece and returns the optimizer state too, so that a long run can be cut into
checkpointed pieces (``gflow.runs.checkpoint``) and resumed bit for bit.

A batch of token ids outside the model's vocabulary 0 .. d_vocab−1 makes that step's
loss NaN, whatever ``batch_loss`` does with it (one comparison and reduction over the
batch, inside the compiled step): the run ends ``diverged`` at that step instead of
learning from clamped or wrapped ids.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, Int, Key, PRNGKeyArray, PyTree

from gflow.dynamics.metrics import evaluate_metrics
from gflow.dynamics.optimizer_step import guarded_step
from gflow.dynamics.trajectory import Trajectory
from gflow.problems.losses import check_token_ids, nan_unless_valid

#: ``stream(key) -> tokens [batch, s + 1]``: a minibatch sampler.
Stream = Callable[[PRNGKeyArray], Int[Array, "b s1"]]
#: ``batch_loss(model, tokens) -> scalar``: the training loss of one minibatch.
BatchLoss = Callable[[PyTree, Int[Array, "b s1"]], Float[Array, ""]]


def step_keys(key: PRNGKeyArray, start: int, steps: int) -> Key[Array, " n"]:
    """The batch keys of steps start .. start+steps−1: ``fold_in(key, k)``, so a run
    cut into pieces draws the same batches as one that is not."""
    return jax.vmap(lambda k: jax.random.fold_in(key, k))(
        jnp.arange(start, start + steps)
    )


def step_sizes(learning_rate: float | Callable, start: int, steps: int) -> np.ndarray:
    """η_k for k = start .. start+steps−1, float64 [steps]: a constant or a schedule."""
    if callable(learning_rate):
        k = jnp.arange(start, start + steps)
        return np.asarray(jax.vmap(learning_rate)(k), np.float64)
    return np.full(steps, float(learning_rate))


def _checked_loss(batch_loss: BatchLoss, model, batch) -> Float[Array, ""]:
    """``batch_loss(model, batch)``, NaN when an integer batch holds an id outside
    0 .. ``model.d_vocab``−1 (models without ``d_vocab`` are not checked)."""
    loss = batch_loss(model, batch)
    d = getattr(model, "d_vocab", None)
    if d is None or not jnp.issubdtype(getattr(batch, "dtype", float), jnp.integer):
        return loss
    check_token_ids(batch, d, name="batch")  # a concrete batch: raise while tracing
    return nan_unless_valid(loss, batch, d)


@eqx.filter_jit
def _segment(
    params,
    static,
    opt_state,
    optimizer,
    stream,
    batch_loss,
    eval_loss,
    observables,
    keys,
    ks,
    save,
    blowup,
):
    # keys: [n_chunks, save_every] batch keys; ks: [n_chunks, save_every] step numbers
    dtype = jax.tree.leaves(params)[0].dtype

    def step(carry, key_k):
        p, s, bad_at = carry
        key, k = key_k
        batch = stream(key)
        p, s, bad_at, _, _ = guarded_step(
            jax.value_and_grad(
                lambda q: _checked_loss(batch_loss, eqx.combine(q, static), batch)
            ),
            optimizer,
            p,
            s,
            bad_at,
            k,
            blowup=blowup,
        )
        return (p, s, bad_at), None

    def record(carry):
        p, bad_at = carry[0], carry[2]
        rec = evaluate_metrics(eval_loss, observables, eqx.combine(p, static))
        nan = jnp.asarray(jnp.nan, dtype)
        rec = jax.tree.map(lambda x: jnp.where(bad_at >= 0, nan, x), rec)
        return rec, (p if save else None)

    def chunk(carry, xs):
        rec = record(carry)
        carry, _ = jax.lax.scan(step, carry, xs)
        return carry, rec

    start = (params, opt_state, jnp.asarray(-1, jnp.int32))
    carry, recs = jax.lax.scan(chunk, start, (keys, ks))
    last = record(carry)
    recs = jax.tree.map(lambda a, b: jnp.concatenate([a, b[None]]), recs, last)
    return recs, carry


def minibatch_segment(
    eval_loss,
    model,
    optimizer: optax.GradientTransformation,
    stream: Stream,
    *,
    batch_loss: BatchLoss,
    key: PRNGKeyArray,
    steps: int,
    save_every: int,
    learning_rate: float | Callable,
    start: int = 0,
    t0: float = 0.0,
    opt_state=None,
    observables=None,
    save_params: bool = False,
    blowup: float = 1e8,
) -> tuple[Trajectory, PyTree]:
    """Steps start .. start+steps−1 of a minibatch run; (Trajectory, optimizer state).

    Args:
        eval_loss: ``loss_fn(model)`` recorded at the saves.
        model: the model at step ``start``.
        optimizer: any optax transformation (its own schedule, if any, should
            match ``learning_rate``, which only sets the clock).
        stream: ``stream(key) -> tokens [batch, s + 1]``.
        batch_loss: ``batch_loss(model, tokens) -> scalar``, the training loss; a
            batch with an id outside 0 .. d_vocab−1 counts as a divergence.
        key: the run's key; step k draws ``stream(fold_in(key, k))``.
        steps: a multiple of ``save_every``.
        save_every: steps between saves; saves at start, start + save_every, ...
        learning_rate: the step size η_k (a number or a schedule k -> η), which
            advances the clock t.
        start, t0: the step number and clock time at which this piece starts.
        opt_state: the optimizer state at step ``start`` (default ``init``).
        observables: as in ``solve_flow``.
        save_params: also keep the parameters at the saves.
        blowup: a parameter norm above this counts as divergence.
    """
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if not isinstance(save_every, (int, np.integer)) or save_every < 1:
        raise ValueError(f"save_every must be a positive integer, got {save_every!r}")
    if steps % save_every:
        raise ValueError(f"steps ({steps}) must be a multiple of save_every")
    params, static = eqx.partition(model, eqx.is_inexact_array)
    opt_state = optimizer.init(params) if opt_state is None else opt_state
    n_chunks = steps // save_every
    keys = step_keys(key, start, steps).reshape(n_chunks, save_every)
    ks = jnp.arange(start, start + steps, dtype=jnp.int32).reshape(n_chunks, -1)
    (recs, snaps), (final, state, bad_at) = _segment(
        params,
        static,
        opt_state,
        optimizer,
        stream,
        batch_loss,
        eval_loss,
        observables,
        keys,
        ks,
        bool(save_params),
        blowup,
    )
    eta = step_sizes(learning_rate, start, steps)
    clock = t0 + np.concatenate([[0.0], np.cumsum(eta)])
    t = clock[::save_every]
    bad_at = int(bad_at)
    stats = {"steps": int(steps), "save_every": int(save_every), "start": int(start)}
    if bad_at >= 0:
        stats["diverged_step"] = bad_at
    traj = Trajectory(
        t=t,
        metrics={k: np.asarray(v) for k, v in recs.items()},
        final=eqx.combine(final, static),
        params=None if snaps is None else eqx.combine(snaps, static),
        status="diverged" if bad_at >= 0 else "success",
        stats=stats,
        info={"kind": "minibatch", "start": int(start), "steps": int(steps)},
    )
    return traj, state


def run_minibatch(
    eval_loss,
    model,
    optimizer: optax.GradientTransformation,
    stream: Stream,
    *,
    batch_loss: BatchLoss,
    steps: int,
    learning_rate: float | Callable,
    key: PRNGKeyArray,
    save_every: int | None = None,
    observables=None,
    save_params: bool = False,
) -> Trajectory:
    """A whole minibatch run from step 0 (``minibatch_segment``'s arguments).

    ``steps`` is rounded up to a multiple of ``save_every`` (default: about 200
    saves).
    """
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    save_every = max(1, steps // 200) if save_every is None else int(save_every)
    steps = -(-steps // save_every) * save_every
    traj, _ = minibatch_segment(
        eval_loss,
        model,
        optimizer,
        stream,
        batch_loss=batch_loss,
        key=key,
        steps=steps,
        save_every=save_every,
        learning_rate=learning_rate,
        observables=observables,
        save_params=save_params,
    )
    return traj
