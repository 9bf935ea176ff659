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

from ..model import AttentionModel
from ..observables import evaluate_metrics
from ..trajectory import Trajectory
from .counts import batch_log_counts, counts_loss
from .positional import COUNTS_MAX_RATIO, text_loss
from .windows import WindowStream


def batch_loss(model, windows: jax.Array) -> jax.Array:
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
    def step(carry, k):
        p, s = carry
        batch = stream(k)
        g = jax.grad(lambda q: batch_loss(eqx.combine(q, static), batch))(p)
        u, s = optimizer.update(g, s, p)
        return (optax.apply_updates(p, u), s), None

    def record(p):
        rec = evaluate_metrics(eval_loss, observables, eqx.combine(p, static))
        return rec, (p if save else None)

    def chunk(carry, ks):
        rec = record(carry[0])
        carry, _ = jax.lax.scan(step, carry, ks)
        return carry, rec

    carry, recs = jax.lax.scan(chunk, (params, opt_state), keys)
    last = record(carry[0])
    recs = jax.tree.map(lambda a, b: jnp.concatenate([a, b[None]]), recs, last)
    return recs, carry[0]


def run_minibatch(
    eval_loss,
    model,
    optimizer: optax.GradientTransformation,
    stream: WindowStream,
    *,
    steps: int,
    learning_rate: float,
    key: jax.Array,
    save_every: int | None = None,
    observables=None,
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
    (recs, snaps), final = _run(
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
    ok = bool(np.all(np.isfinite(metrics["loss"])))
    return Trajectory(
        t=t,
        metrics=metrics,
        final=eqx.combine(final, static),
        params=None if snaps is None else eqx.combine(snaps, static),
        status="success" if ok else "diverged",
        stats={"steps": steps, "save_every": save_every, "batch": stream.batch},
        info={"kind": "minibatch", "steps": steps, "learning_rate": learning_rate},
    )
