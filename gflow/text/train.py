"""Minibatch optimizer runs on a stream of random windows (SGD/Adam, keyed).

``gflow.run_optimizer`` takes a fixed loss; here every step draws a fresh batch from a
``WindowStream`` while the recorded loss and observables use a fixed evaluation loss
(the full-batch sample), so runs with and without minibatches share their metrics.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray

from gflow.array_types import LossFn, Observables
from gflow.dynamics.metrics import evaluate_metrics
from gflow.dynamics.optimizer_step import guarded_step
from gflow.dynamics.trajectory import Trajectory
from gflow.problems.model import AttentionModel
from gflow.text.counts import batch_log_counts, counts_loss
from gflow.text.positional import (
    COUNTS_MAX_RATIO,
    PositionalAttentionModel,
    text_loss,
)
from gflow.text.windows import WindowStream


def batch_loss(
    model: AttentionModel | PositionalAttentionModel, windows: Int[Array, "b s1"]
) -> Float[Array, ""]:
    """The last-token loss of a batch: the counts form for an ``AttentionModel``
    where it is the cheaper form (d <= ``COUNTS_MAX_RATIO``·s, as ``TextLoss``),
    else ``text_loss``."""
    s = windows.shape[1] - 1
    if isinstance(model, AttentionModel) and model.d_vocab <= COUNTS_MAX_RATIO * s:
        lc = batch_log_counts(windows, model.d_vocab, model.W_E.dtype)
        return counts_loss(model, lc, windows)
    return text_loss(model, windows)


@eqx.filter_jit
def _run(
    params, static, opt_state, optimizer, stream, eval_loss, observables, keys, save
):
    # keys: [n_chunks, save_every] step keys.
    dtype = jax.tree.leaves(params)[0].dtype

    def step(carry, key):
        p, s, bad_at, k = carry
        batch = stream(key)
        p, s, bad_at, _, _ = guarded_step(
            jax.value_and_grad(lambda q: batch_loss(eqx.combine(q, static), batch)),
            optimizer,
            p,
            s,
            bad_at,
            k,
        )
        return (p, s, bad_at, k + 1), None

    def record(carry):
        p, bad_at = carry[0], carry[2]
        rec = evaluate_metrics(eval_loss, observables, eqx.combine(p, static))
        nan = jnp.asarray(jnp.nan, dtype)
        rec = jax.tree.map(lambda x: jnp.where(bad_at >= 0, nan, x), rec)
        return rec, (p if save else None)

    def chunk(carry, ks):
        rec = record(carry)
        carry, _ = jax.lax.scan(step, carry, ks)
        return carry, rec

    minus_one, zero = jnp.asarray(-1, jnp.int32), jnp.asarray(0, jnp.int32)
    carry, recs = jax.lax.scan(chunk, (params, opt_state, minus_one, zero), keys)
    last = record(carry)
    recs = jax.tree.map(lambda a, b: jnp.concatenate([a, b[None]]), recs, last)
    return recs, carry[0], carry[2]


def run_minibatch(
    eval_loss: LossFn,
    model: AttentionModel | PositionalAttentionModel,
    optimizer: optax.GradientTransformation,
    stream: WindowStream,
    *,
    steps: int,
    learning_rate: float,
    key: PRNGKeyArray,
    save_every: int | None = None,
    observables: Observables = None,
    save_params: bool = False,
) -> Trajectory:
    """Train on minibatches ``stream(key_k)``; record ``eval_loss`` and observables.

    Args:
        eval_loss: ``loss_fn(model)`` recorded at the saves (e.g. the full-batch
            ``TextLoss``).
        model: initial model (``AttentionModel`` or ``PositionalAttentionModel``).
        optimizer: an optax transformation with a constant step size.
        stream: the minibatch sampler (last-token loss on its windows).
        steps: optimizer steps; rounded up to a multiple of ``save_every``.
        learning_rate: the constant step size η; the clock is t_k = k η.
        key: PRNG key; batch k uses the k-th of ``jax.random.split(key, steps)``.
        save_every: steps between saves (default: about 200 saves).
        observables: as in ``run_optimizer``.
        save_params: also keep the parameters at the saved steps
            (``Trajectory.params``, e.g. for ``observe_snapshots``).
    """
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    save_every = max(1, steps // 200) if save_every is None else int(save_every)
    n_chunks = -(-steps // save_every)
    steps = n_chunks * save_every
    params, static = eqx.partition(model, eqx.is_inexact_array)
    keys = jax.random.split(key, steps).reshape(n_chunks, save_every)
    (recs, snaps), final, bad_at = _run(
        params,
        static,
        optimizer.init(params),
        optimizer,
        stream,
        eval_loss,
        observables,
        keys,
        bool(save_params),
    )
    metrics = {k: np.asarray(v) for k, v in recs.items()}
    t = np.arange(n_chunks + 1) * save_every * float(learning_rate)
    bad_at = int(bad_at)
    stats = {"steps": steps, "save_every": save_every, "batch": stream.batch}
    if bad_at >= 0:
        stats["diverged_step"] = bad_at
    return Trajectory(
        t=t,
        metrics=metrics,
        final=eqx.combine(final, static),
        params=None if snaps is None else eqx.combine(snaps, static),
        status="diverged" if bad_at >= 0 else "success",
        stats=stats,
        info={"kind": "minibatch", "steps": steps, "learning_rate": learning_rate},
    )
