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

from ..observables import evaluate_metrics
from ..trajectory import Trajectory
from .positional import text_loss
from .windows import WindowStream


@eqx.filter_jit
def _run(params, static, opt_state, optimizer, stream, eval_loss, observables, keys):
    # keys: [n_chunks, save_every] step keys.
    def step(carry, k):
        p, s = carry
        batch = stream(k)
        g = jax.grad(lambda q: text_loss(eqx.combine(q, static), batch))(p)
        u, s = optimizer.update(g, s, p)
        return (optax.apply_updates(p, u), s), None

    def chunk(carry, ks):
        rec = evaluate_metrics(eval_loss, observables, eqx.combine(carry[0], static))
        carry, _ = jax.lax.scan(step, carry, ks)
        return carry, rec

    carry, recs = jax.lax.scan(chunk, (params, opt_state), keys)
    last = evaluate_metrics(eval_loss, observables, eqx.combine(carry[0], static))
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
    """
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    save_every = max(1, steps // 200) if save_every is None else int(save_every)
    n_chunks = -(-steps // save_every)
    steps = n_chunks * save_every
    params, static = eqx.partition(model, eqx.is_inexact_array)
    keys = jax.random.split(key, steps).reshape(n_chunks, save_every)
    recs, final = _run(
        params,
        static,
        optimizer.init(params),
        optimizer,
        stream,
        eval_loss,
        observables,
        keys,
    )
    metrics = {k: np.asarray(v) for k, v in recs.items()}
    t = np.arange(n_chunks + 1) * save_every * float(learning_rate)
    ok = bool(np.all(np.isfinite(metrics["loss"])))
    return Trajectory(
        t=t,
        metrics=metrics,
        final=eqx.combine(final, static),
        status="success" if ok else "diverged",
        stats={"steps": steps, "save_every": save_every, "batch": stream.batch},
        info={"kind": "minibatch", "steps": steps, "learning_rate": learning_rate},
    )
