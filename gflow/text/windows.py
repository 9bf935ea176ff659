"""Fixed-length windows of a token stream: a fixed full-batch sample and a stream.

A window is s+1 consecutive ids: context ``w[:-1]`` and target ``w[-1]`` (the rows
``gflow.sequence_loss`` takes). The stream's ids are checked when a sample or stream
is made: integers >= 0 and, given ``d_vocab``, below it (a ValueError naming the
first bad id and its position in the stream).
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Int, PRNGKeyArray

from gflow.problems.losses import check_token_ids


def _check(ids, length: int, d_vocab: int | None) -> np.ndarray:
    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise ValueError(f"ids must be a 1-d token stream, got shape {ids.shape}")
    if not isinstance(length, (int, np.integer)) or length < 1:
        raise ValueError(f"context length must be a positive integer, got {length!r}")
    if ids.shape[0] < length + 1:
        raise ValueError(
            f"the corpus has {ids.shape[0]} tokens, fewer than one window of "
            f"{length + 1}: use a shorter context length or a longer corpus"
        )
    check_token_ids(ids, d_vocab, name="ids")
    return ids


def fixed_sample(
    ids: Int[ArrayLike, " n"] | Sequence[int],
    *,
    length: int,
    num: int,
    d_vocab: int | None = None,
) -> Int[np.ndarray, "b s1"]:
    """``num`` windows of ``length + 1`` ids at evenly spaced starts (deterministic).

    The starts spread over the whole stream, so the sample covers the corpus; they
    overlap only when the stream is shorter than ``num * (length + 1)``. The ids
    must be integers >= 0 and, given ``d_vocab``, below it.

    Returns:
        int32 [num, length + 1].
    """
    ids = _check(ids, length, d_vocab)
    if not isinstance(num, (int, np.integer)) or num < 1:
        raise ValueError(f"number of windows must be a positive integer, got {num!r}")
    last = ids.shape[0] - (length + 1)
    if num > last + 1:
        raise ValueError(
            f"asked for {num} windows but the corpus has only {last + 1} distinct "
            f"windows of {length + 1} tokens: lower the number of windows"
        )
    starts = np.linspace(0, last, num).round().astype(np.int64)
    return ids[starts[:, None] + np.arange(length + 1)].astype(np.int32)


def query_windows(
    ids: Int[ArrayLike, " n"] | Sequence[int],
    queries: Sequence[int],
    *,
    length: int,
    per_query: int,
    d_vocab: int | None = None,
) -> Int[np.ndarray, "b s1"]:
    """Up to ``per_query`` windows whose last context token is each query, at evenly
    spaced occurrences of it over the stream (deterministic): what a tracked row is
    measured on when the fixed sample ends at a rare query only a few times or never.
    The ids are checked as in ``fixed_sample``.

    Returns:
        int32 [b, length + 1], the windows of ``queries[0]`` first; b is below
        ``len(queries) * per_query`` for queries that occur fewer times.
    """
    ids = _check(ids, length, d_vocab)
    if not isinstance(per_query, (int, np.integer)) or per_query < 0:
        raise ValueError(f"per_query must be an integer >= 0, got {per_query!r}")
    ends = np.arange(length - 1, ids.shape[0] - 1)  # the window's last context token
    out = [np.zeros((0, length + 1), np.int32)]
    for q in queries:
        at = ends[ids[ends] == q]
        if at.size == 0 or per_query == 0:
            continue
        pick = at[np.unique(np.linspace(0, at.size - 1, per_query).round().astype(int))]
        out.append(ids[pick[:, None] + np.arange(-length + 1, 2)].astype(np.int32))
    return np.concatenate(out)


class WindowStream(eqx.Module):
    """Minibatches of random windows, keyed by ``jax.random`` (jit- and scan-safe).

    ``stream(key)`` draws ``batch`` start positions uniformly and returns int32
    [batch, length + 1]. Same key, same batch. The ids are checked once, here (as
    in ``fixed_sample``, against ``d_vocab`` when given), not at every draw.
    """

    ids: Int[Array, " n"]
    length: int = eqx.field(static=True)
    batch: int = eqx.field(static=True)

    def __init__(
        self,
        ids: Int[ArrayLike, " n"] | Sequence[int],
        *,
        length: int,
        batch: int,
        d_vocab: int | None = None,
    ):
        ids = _check(ids, length, d_vocab)
        if not isinstance(batch, (int, np.integer)) or batch < 1:
            raise ValueError(f"batch must be a positive integer, got {batch!r}")
        self.ids = jnp.asarray(ids, dtype=jnp.int32)
        self.length = int(length)
        self.batch = int(batch)

    def __call__(self, key: PRNGKeyArray) -> Int[Array, "b s1"]:
        n = self.ids.shape[0]
        starts = jax.random.randint(key, (self.batch,), 0, n - self.length)
        return self.ids[starts[:, None] + jnp.arange(self.length + 1)]
