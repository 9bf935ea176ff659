"""Where a head's attention mass sits: key classes and their excess over uniform
causal attention (the stage-label rules of docs/stage_rules.md).

A query at position i of context x attends to the keys j ≤ i. Its mass on a *key
class* c is Σ_j a_ij [j ∈ c] for the classes, in this order (``KEY_CLASSES``):

- ``top``: keys whose token is the most frequent token (the chain's π; the
  corpus's most frequent piece);
- ``self``: keys whose token is the query's own token, x_j = x_i (the query's own
  position included), when that token is not the top one (a top query on itself
  is on ``top``: the classes the paper's cycles read do not overlap);
- ``previous``: the previous position, j = i - 1;
- ``first``: the first position, j = 0 (an attention sink);
- ``induction``: the successor of an earlier occurrence of the query's token,
  x_{j-1} = x_i with 1 ≤ j ≤ i.

Uniform causal attention gives class c the share |{j ≤ i : j ∈ c}| / (i + 1): on
the paper's chain the top token already holds about 0.75 of it, on a uniform π
about 1/d. A head's *excess* on c is its mass minus that baseline, averaged over a
set of query rows: a focus onto c is a rise of the excess, not a level. The classes
overlap (the previous token may be the top one); a move is named by the class whose
excess rose most over it, and ``diffuse`` when none rose by half the margin (a
label reads the move between its 5% and 95% points, which a rule's margin
measures between turning points).

The arithmetic is written once for an array namespace ``xp`` (``numpy``,
``jax.numpy`` or ``torch``), so the offline observables, the JAX monitor and the
other frameworks' monitors compute the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from jaxtyping import ArrayLike, Int

#: The key classes, in the order of the last axis of ``head_key_excess``.
KEY_CLASSES = ("top", "self", "previous", "first", "induction")
#: The label of a move onto no class by the margin.
DIFFUSE = "diffuse"

__all__ = [
    "DIFFUSE",
    "KEY_CLASSES",
    "class_masks",
    "excess_signals",
    "key_excess",
    "moved_onto",
    "top_dominance",
]


def _cast(mask, dtype):
    """A boolean mask as ``dtype`` in NumPy and JAX (``astype``) or torch (``to``)."""
    astype = getattr(mask, "astype", None)
    return astype(dtype) if astype is not None else mask.to(dtype)


def class_masks(xp, contexts, rows: int, top, dtype) -> Any:
    """Masks [C, b, r, s] of the key classes (module docstring) for the last
    ``rows`` query positions of ``contexts`` [b, s], in ``dtype``; causal (no key
    after its query)."""
    b, s = contexts.shape
    # positions made from the contexts, so that torch keeps them on their device
    positions = xp.cumsum(contexts[0] * 0 + 1, 0) - 1  # [s]: 0, 1, ..., s - 1
    q_pos = positions[s - rows :][:, None]  # [r, 1] absolute query positions
    k_pos = positions[None, :]  # [1, s]
    causal = k_pos <= q_pos  # [r, s]
    queries = contexts[:, s - rows :]  # [b, r]
    same = queries[:, :, None] == contexts[:, None, :]  # [b, r, s]
    # the token before each key (none before key 0: a token that matches nothing)
    before = xp.concatenate([contexts[:, :1] * 0 - 1, contexts[:, :-1]], axis=1)
    induction = (queries[:, :, None] == before[:, None, :]) & (k_pos >= 1)
    every = same | ~same  # [b, r, s], all true: broadcasts the positional classes
    top_key = (contexts == top)[:, None, :]  # [b, 1, s]
    masks = [
        top_key & causal,
        same & causal & ~top_key,
        every & (k_pos == q_pos - 1),
        every & (k_pos == 0),
        induction & causal,
    ]
    return xp.stack([_cast(m, dtype) for m in masks])


def key_excess(xp, attn, masks, weights) -> Any:
    """Each head's mean excess mass on each key class over the query rows weighted
    by ``weights`` [b, r] (0/1 or counts): attention ``attn`` [l, h, b, r, s],
    ``masks`` [C, b, r, s] from ``class_masks``. Returns [l, h, C]; 0 where the
    weights sum to 0."""
    s, r = attn.shape[-1], attn.shape[-2]
    mass = xp.einsum("lhbij,cbij->lhcbi", attn, masks)  # [l, h, C, b, r]
    keys_seen = xp.cumsum(masks[0, 0, :, 0] * 0 + 1, 0) + (s - r)  # [r]: i + 1
    base = xp.sum(masks, -1) / keys_seen  # [C, b, r]
    total = xp.sum(weights)
    excess = xp.einsum("lhcbi,bi->lhc", mass - base, weights)
    some = total > 0
    return xp.where(some, excess / xp.where(some, total, 1.0), 0.0 * excess)


def excess_signals(xp, attn, masks, is_tracked, top_query) -> dict:
    """The three excess signals of the stage rules from attention [l, h, b, r, s]
    and ``masks`` [C, b, r, s]: ``head_key_excess`` (every query row),
    ``head_tracked_key_excess`` (the rows weighted by ``is_tracked`` [b, r]) and
    ``head_top_query_excess`` (the top token's rows, ``top_query`` [b, r], on the
    top class)."""
    return {
        "head_key_excess": key_excess(xp, attn, masks, is_tracked * 0 + 1),
        "head_tracked_key_excess": key_excess(xp, attn, masks, is_tracked),
        "head_top_query_excess": key_excess(xp, attn, masks[:1], top_query)[..., 0],
    }


def top_dominance(tokens: Int[ArrayLike, "..."] | Sequence[int], top: int) -> float:
    """How much more frequent the token ``top`` is than the next most frequent one
    in ``tokens``: count(top) / max count of any other token (inf when no other
    token occurs, 0 when top does not)."""
    toks = np.asarray(tokens).ravel()
    if toks.size == 0:
        return 0.0
    counts = np.bincount(toks - toks.min())
    top_i = int(top) - int(toks.min())
    n_top = float(counts[top_i]) if 0 <= top_i < counts.size else 0.0
    others = np.delete(counts, top_i) if 0 <= top_i < counts.size else counts
    second = float(others.max()) if others.size else 0.0
    return np.inf if second == 0 else n_top / second


def moved_onto(
    before: Sequence[float] | ArrayLike,
    after: Sequence[float] | ArrayLike,
    margin: float,
) -> str:
    """The key class whose excess rose most from ``before`` [C] to ``after`` [C],
    or ``"diffuse"`` when none rose by half the ``margin`` (module docstring)."""
    rise = np.asarray(after, float) - np.asarray(before, float)
    if rise.shape != (len(KEY_CLASSES),):
        raise ValueError(
            f"excess vectors must have {len(KEY_CLASSES)} entries {KEY_CLASSES}, "
            f"got shape {rise.shape}"
        )
    i = int(np.argmax(rise))
    return KEY_CLASSES[i] if rise[i] >= margin / 2 else DIFFUSE
