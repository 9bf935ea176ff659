"""Attention probabilities of a probe batch reduced to the monitor's per-head signals.

``attention_signals(attention, tokens, top=..., tracked=...)`` takes the attention
weights a_{lhnij} of layer l, head h, context n, query position i and key position
j (shape [layers, heads, batch, query, key], the rows of the last ``query`` positions
of each context ``tokens[n, :-1]``) from any framework, as NumPy arrays, and gives
the signals of ``gflow.analysis.head_observables`` (the same definitions):

- ``head_entropy`` [l, h]: the entropy (nats) of the last query row, mean over n;
- ``head_on_top`` [l, h]: the mass on keys equal to ``top``, averaged over the
  queries whose token is ``top``;
- ``head_tracked_on_top`` [l, h, q]: the same for each tracked query token;
- ``head_self`` [l, h]: the mass a tracked query puts on keys equal to itself;
- ``head_key_excess``, ``head_tracked_key_excess`` [l, h, C] and
  ``head_top_query_excess`` [l, h]: the excess mass on each key class
  (``gflow.analysis.key_classes``) over uniform causal attention, over every query
  row, the tracked queries' rows and the top token's rows.

A mean over no occurrence is 0. The arithmetic is written once for an array
namespace (``numpy`` or ``jax.numpy``), so the JAX path runs it inside its jitted
call on the device and every other framework runs it in NumPy on the host.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from jaxtyping import ArrayLike, Float, Int

from gflow.analysis.key_classes import class_masks, excess_signals

__all__ = ["AttentionSignals", "ProbeMasks", "attention_signals", "reduce_attention"]


def _masked_mean(xp, values, count):
    some = count > 0
    return xp.where(some, values / xp.where(some, count, 1.0), 0.0)


def _cast(mask, dtype):
    """A boolean mask as ``dtype`` in NumPy and JAX (``astype``) or torch (``to``)."""
    astype = getattr(mask, "astype", None)
    return astype(dtype) if astype is not None else mask.to(dtype)


@dataclass(frozen=True)
class ProbeMasks:
    """The probe's token masks the reduction weighs attention with, in the
    attention's dtype (the probe is fixed, so an adapter may build them once)."""

    top_key: Any  # [b, s]: key j of context n is top
    top_query: Any  # [b, r]: query i is top
    same: Any  # [b, r, s]: key j equals query i
    query: Any  # [b, r, q]: query i is tracked token q
    is_tracked: Any  # [b, r]: query i is any tracked token
    classes: Any  # [C, b, r, s]: key j of query i is in key class c

    @classmethod
    def of(cls, contexts, rows: int, top, tracked, dtype) -> ProbeMasks:
        """The masks of ``contexts`` [b, s] for the last ``rows`` queries."""
        queries = contexts[:, contexts.shape[1] - rows :]  # [b, r]
        query = _cast(queries[:, :, None] == tracked, dtype)
        return cls(
            top_key=_cast(contexts == top, dtype),
            top_query=_cast(queries == top, dtype),
            same=_cast(queries[:, :, None] == contexts[:, None, :], dtype),
            query=query,
            is_tracked=_cast(query.sum(-1) > 0, dtype),
            classes=class_masks(xp_of(contexts), contexts, rows, top, dtype),
        )


def xp_of(array):
    """The array namespace of ``array``: torch for a tensor, jax.numpy for a JAX
    array, numpy otherwise (without importing a framework the caller lacks)."""
    kind = type(array).__module__.split(".")[0]
    if kind == "torch":
        import torch

        return torch
    if kind in ("jax", "jaxlib"):
        import jax.numpy as jnp

        return jnp
    return np


def reduce_attention(xp, attn, contexts, top, tracked, masks=None) -> dict:
    """The per-head signals from attention [l, h, b, r, s] and contexts [b, s] in
    the array namespace ``xp`` (module docstring): ``numpy``, ``jax.numpy`` or
    ``torch`` (then ``contexts`` and ``tracked`` are tensors on the attention's
    device), computed in the attention's dtype; ``masks``: the ``ProbeMasks`` of
    these contexts, built here when not given."""
    if masks is None:
        masks = ProbeMasks.of(contexts, attn.shape[-2], top, tracked, attn.dtype)
    on_top = xp.matmul(attn, masks.top_key[:, :, None])[..., 0]  # [l, h, b, r]
    on_self = xp.einsum("lhbij,bij->lhbi", attn, masks.same)
    last = attn[..., -1, :]  # [l, h, b, s]
    plogp = xp.where(last > 0, last * xp.log(xp.where(last > 0, last, 1.0)), 0.0)
    excess = excess_signals(xp, attn, masks.classes, masks.is_tracked, masks.top_query)
    return excess | {
        "head_entropy": xp.mean(-xp.sum(plogp, axis=-1), axis=-1),
        "head_on_top": _masked_mean(
            xp,
            xp.einsum("lhbi,bi->lh", on_top, masks.top_query),
            xp.sum(masks.top_query),
        ),
        "head_tracked_on_top": _masked_mean(
            xp,
            xp.einsum("lhbi,biq->lhq", on_top, masks.query),
            xp.sum(masks.query, axis=(0, 1)),
        ),
        "head_self": _masked_mean(
            xp,
            xp.einsum("lhbi,bi->lh", on_self, masks.is_tracked),
            xp.sum(masks.is_tracked),
        ),
    }


@dataclass(frozen=True)
class AttentionSignals:
    """The per-head signals of one observation (NumPy; shapes in the module
    docstring)."""

    head_entropy: np.ndarray
    head_on_top: np.ndarray
    head_tracked_on_top: np.ndarray
    head_self: np.ndarray
    head_key_excess: np.ndarray
    head_tracked_key_excess: np.ndarray
    head_top_query_excess: np.ndarray

    def as_dict(self) -> dict[str, np.ndarray]:
        """The signals by name, as ``Monitor.record`` reads them."""
        return dict(vars(self))


def attention_signals(
    attention: Float[ArrayLike, "l h b r s"],
    tokens: Int[ArrayLike, "b s1"],
    *,
    top: int,
    tracked: Sequence[int] | Int[ArrayLike, " q"],
) -> AttentionSignals:
    """Reduce attention probabilities [layers, heads, batch, query, key] of the probe
    ``tokens`` [b, s+1] (contexts ``tokens[:, :-1]``) to the per-head signals.

    Args:
        attention: each row a probability vector over the ``s`` keys of its
            context; ``query`` ≤ s rows, those of the last positions.
        tokens: the probe batch, int [b, s+1].
        top: the most frequent token.
        tracked: the tracked query tokens [q].
    """
    a = np.asarray(attention, dtype=float)
    toks = np.asarray(tokens)
    if toks.ndim != 2 or toks.shape[1] < 2:
        raise ValueError(f"tokens must be int [batch, s+1], got {toks.shape}")
    if not np.issubdtype(toks.dtype, np.integer):
        raise TypeError(f"tokens must be integers, got {toks.dtype}")
    b, s = toks.shape[0], toks.shape[1] - 1
    if a.ndim != 5 or a.shape[2] != b or a.shape[4] != s or not 1 <= a.shape[3] <= s:
        raise ValueError(
            f"attention must be [layers, heads, {b}, query <= {s}, {s}] for tokens "
            f"{toks.shape}, got {a.shape}"
        )
    tracked = np.asarray(tracked, dtype=toks.dtype).reshape(-1)
    out = reduce_attention(np, a, toks[:, :-1], int(top), tracked)
    return AttentionSignals(**{k: np.asarray(v, float) for k, v in out.items()})
