"""Minibatch optimizer runs on a stream of random text windows (any optax, keyed).

The loop is ``gflow.dynamics.minibatch``'s; here is the text's batch loss (the counts
form where it is cheaper) and the text run's record of the batch size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray

from gflow.array_types import LossFn, Observables
from gflow.dynamics import minibatch
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


def run_minibatch(
    eval_loss: LossFn,
    model: AttentionModel | PositionalAttentionModel,
    optimizer: optax.GradientTransformation,
    stream: WindowStream,
    *,
    steps: int,
    learning_rate: float | Callable,
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
        optimizer: an optax transformation (its step size, constant or a schedule,
            should be ``learning_rate``).
        stream: the minibatch sampler (last-token loss on its windows).
        steps: optimizer steps; rounded up to a multiple of ``save_every``.
        learning_rate: the step size η_k, a number or a schedule k -> η_k; it only
            sets the clock t = Σ η_k (recorded as a number, or "schedule").
        key: PRNG key; batch k is ``stream(fold_in(key, k))``.
        save_every: steps between saves (default: about 200 saves).
        observables: as in ``run_optimizer``.
        save_params: also keep the parameters at the saved steps
            (``Trajectory.params``, e.g. for ``observe_snapshots``).
    """
    traj = minibatch.run_minibatch(
        eval_loss,
        model,
        optimizer,
        stream,
        batch_loss=batch_loss,
        steps=steps,
        learning_rate=learning_rate,
        key=key,
        save_every=save_every,
        observables=observables,
        save_params=save_params,
    )
    stats = {**traj.stats, "batch": stream.batch}
    rate = "schedule" if callable(learning_rate) else learning_rate
    return dataclasses.replace(
        traj,
        stats=stats,
        info={"kind": "minibatch", "steps": stats["steps"], "learning_rate": rate},
    )
