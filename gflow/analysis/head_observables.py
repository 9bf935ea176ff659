"""Per-head observables of an attending model on a fixed sample (issues 14, 15).

The one-layer observables (``StageObservables``) read one population attention
matrix; a Transformer has one causal attention pattern per layer and head, so its
observables (and those of any attending model, ``gflow.analysis.attending``) are
measured on a fixed evaluation sample ``tokens`` [b, s+1] (contexts
``tokens[:, :-1]``). With a_{nij} the weight that query position i of context n puts
on key position j ≤ i in one head, and x_{nj} the tokens:

- ``head_entropy``: H(a_{n,s-1,·}), the entropy (nats) of the last position's
  attention row, averaged over the contexts (``head_attention_entropy``);
- ``head_on_top``: the mass Σ_j a_{nij} [x_{nj} = top] on keys equal to the most
  frequent token, averaged over every (n, i) whose query token x_{ni} is ``top``;
- ``head_tracked_on_top`` [q]: the same for each tracked query token;
- ``head_self``: the mass Σ_j a_{nij} [x_{nj} = x_{ni}] that a tracked query puts on
  keys equal to itself, averaged over every occurrence of a tracked query (so each
  tracked token weighs by its frequency, as the π-weighting of the one-layer rules);
- ``head_key_excess`` [C]: the excess mass on each key class of
  ``gflow.analysis.key_classes`` (top token, own token, previous position, first
  position, induction target) over what uniform causal attention gives it,
  averaged over every query row; ``head_tracked_key_excess`` [C]: the same over the
  tracked queries' rows; ``head_top_query_excess``: the excess on the top token
  over the top token's own rows;
- ``top_dominance``: how many times as frequent the top token is as the next one
  in the sample's contexts (the paper's cycle-1 focus is defined only when it is
  clearly the most frequent; NaN when the sample was not concrete at
  construction).

Every query position whose row the model gives counts, position 0 included (whose
only key is itself); a model that gives only the last row counts the last position.
A mean over no occurrence is 0, not NaN. The singular values of each head's
W_A,h = W_Q,h W_K,hᵀ and W_OV,h = W_V,h W_O,h (m × m, rank ≤ k = m/H) are the top k,
computed from the k × k triangular factors of a QR of the m × k factors (the same
values as the SVD of the m × m product, at 1/H³ of its cost); for another model they
are its ``attention_singular_values()``, when it has them.
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, Real

from gflow.analysis.attending import Attending, attention_rows, head_singular_values
from gflow.analysis.key_classes import class_masks, excess_signals, top_dominance
from gflow.analysis.observables import entropy, singular_values
from gflow.problems.transformer import product_singular_values

__all__ = ["HeadObservables", "head_attention_entropy", "product_singular_values"]


def _attention(
    model: Attending, contexts: Int[Array, "b s"]
) -> Float[Array, "b l h r s"]:
    return jax.vmap(lambda c: attention_rows(model, c))(contexts)


def _last_row_entropy(attn: Float[Array, "b l h r s"]) -> Float[Array, "l h"]:
    return jnp.mean(entropy(attn[..., -1, :]), axis=0)


def head_attention_entropy(
    model: Attending, tokens: Int[ArrayLike, "b s1"]
) -> Float[Array, "l h"]:
    """Entropy (nats) of the last position's attention row of every layer and head,
    averaged over the contexts ``tokens[:, :-1]``."""
    contexts = jnp.asarray(tokens)[:, :-1]
    return _last_row_entropy(_attention(model, contexts))


def _masked_mean(
    values: Float[Array, "..."], count: Float[Array, "..."]
) -> Float[Array, "..."]:
    """values / count where count > 0, else 0 (no NaN, no Python branch)."""
    some = count > 0
    return jnp.where(some, values / jnp.where(some, count, 1.0), 0.0)


class HeadObservables(eqx.Module):
    """Per-head observables of an attending model (a Transformer, say) on a fixed
    sample, one dict per model.

    Keys (shapes per saved time; l layers, h heads, q tracked tokens, k = m / h,
    C key classes): ``head_entropy`` [l, h], ``head_on_top`` [l, h],
    ``head_tracked_on_top`` [l, h, q], ``head_self`` [l, h], ``head_key_excess``
    and ``head_tracked_key_excess`` [l, h, C], ``head_top_query_excess`` [l, h],
    ``top_dominance`` [] (module docstring), ``sv_W_E`` [min(d, m)],
    ``sv_W_P`` [min(m, d)] (models with ``W_E`` and ``W_P``), ``sv_W_A`` [l, h, k]
    (models with ``attention_singular_values``) and, when a Transformer has value
    matrices, ``sv_W_OV`` [l, h, k].

    Fields (all arrays, hence traced: a new sample of the same shape, or a new top
    or tracked set, does not recompile; the module can be vmapped over samples):
        tokens: int [b, s+1], the evaluation sample (contexts ``tokens[:, :-1]``).
        top: int scalar, the most frequent token.
        tracked: int [q], the tracked query tokens (the low-frequency ones, say).
        dominance: float scalar, ``top_dominance`` of the sample's contexts
            (computed at construction).
    """

    tokens: Int[Array, "b s1"]
    top: Int[Array, ""]
    tracked: Int[Array, " q"]
    dominance: Float[Array, ""]

    def __init__(
        self,
        tokens: Int[ArrayLike, "b s1"],
        top: int | Int[ArrayLike, ""],
        tracked: Int[ArrayLike, " q"] | Sequence[int],
    ):
        self.tokens = jnp.asarray(tokens)
        self.top = jnp.asarray(top, dtype=self.tokens.dtype)
        self.tracked = jnp.asarray(tracked, dtype=self.tokens.dtype).reshape(-1)
        try:
            ratio = top_dominance(np.asarray(self.tokens)[:, :-1], int(self.top))
        except (TypeError, IndexError, ValueError):
            ratio = np.nan  # built under a transformation: unknown
        self.dominance = jnp.asarray(min(ratio, 1e30), dtype=float)

    def __check_init__(self):
        if self.tokens.ndim != 2 or self.tokens.shape[1] < 2:
            raise ValueError(
                f"tokens must be int [batch, s+1] with s >= 1, got {self.tokens.shape}"
            )

    @classmethod
    def from_counts(
        cls,
        tokens: Int[ArrayLike, "b s1"],
        counts: Real[ArrayLike, " d"] | Sequence[float],
        *,
        n_tracked: int = 3,
    ) -> HeadObservables:
        """Top = the token with the largest count; tracked = the ``n_tracked``
        tokens with the smallest positive counts other than top (ties: lower id).

        ``counts`` may come from the whole corpus or from the sample itself.
        """
        counts = np.asarray(counts, dtype=float)
        if counts.ndim != 1 or counts.size < 2:
            raise ValueError(f"counts must be a vector of d >= 2, got {counts.shape}")
        if not isinstance(n_tracked, int) or n_tracked < 1:
            raise ValueError(f"n_tracked must be a positive integer, got {n_tracked}")
        top = int(np.argmax(counts))
        present = [i for i in range(counts.size) if counts[i] > 0 and i != top]
        if not present:
            raise ValueError("no token other than the most frequent one occurs")
        present.sort(key=lambda i: (counts[i], i))
        return cls(tokens, top, np.asarray(present[:n_tracked]))

    @classmethod
    def default(
        cls, tokens: Int[ArrayLike, "b s1"], d_vocab: int, *, n_tracked: int = 3
    ) -> HeadObservables:
        """Top and tracked tokens from the counts of the contexts ``tokens[:, :-1]``
        (the query positions the observables average over): top the most frequent,
        tracked the ``n_tracked`` least frequent that occur."""
        contexts = np.asarray(tokens)[:, :-1].ravel()
        if contexts.size and (contexts.min() < 0 or contexts.max() >= d_vocab):
            raise ValueError(f"tokens must lie in [0, {d_vocab})")
        counts = np.bincount(contexts, minlength=d_vocab)
        return cls.from_counts(tokens, counts, n_tracked=n_tracked)

    def __call__(self, model: Attending) -> dict[str, Float[Array, "..."]]:
        contexts = self.tokens[:, :-1]  # [b, s]
        attn = _attention(model, contexts)  # [b, l, h, r, s]
        dtype = attn.dtype
        queries = contexts[:, contexts.shape[1] - attn.shape[-2] :]  # [b, r]
        top_key = (contexts == self.top).astype(dtype)  # [b, s]
        top_query = (queries == self.top).astype(dtype)  # [b, r]
        on_top = jnp.einsum("blhij,bj->blhi", attn, top_key)  # mass on top keys
        same = (queries[:, :, None] == contexts[:, None, :]).astype(dtype)
        on_self = jnp.einsum("blhij,bij->blhi", attn, same)  # mass on own token
        query = (queries[:, :, None] == self.tracked).astype(dtype)  # [b, r, q]
        is_tracked = jnp.max(query, axis=-1, initial=0.0)  # [b, r]
        out = {
            "head_entropy": _last_row_entropy(attn),
            "head_on_top": _masked_mean(
                jnp.einsum("blhi,bi->lh", on_top, top_query), jnp.sum(top_query)
            ),
            "head_tracked_on_top": _masked_mean(
                jnp.einsum("blhi,biq->lhq", on_top, query), jnp.sum(query, axis=(0, 1))
            ),
            "head_self": _masked_mean(
                jnp.einsum("blhi,bi->lh", on_self, is_tracked), jnp.sum(is_tracked)
            ),
        }
        masks = class_masks(jnp, contexts, attn.shape[-2], self.top, dtype)
        heads_first = jnp.moveaxis(attn, 0, 2)  # [l, h, b, r, s]
        out |= excess_signals(jnp, heads_first, masks, is_tracked, top_query)
        out["top_dominance"] = self.dominance.astype(dtype)
        W_E, W_P = getattr(model, "W_E", None), getattr(model, "W_P", None)
        if W_E is not None and W_P is not None:
            out["sv_W_E"] = singular_values(W_E)
            out["sv_W_P"] = singular_values(W_P)
        sv = head_singular_values(model)
        if sv is not None:
            out["sv_W_A"] = sv
        blocks = getattr(model, "blocks", None)
        if blocks and all(getattr(b, "W_V", None) is not None for b in blocks):
            out["sv_W_OV"] = jnp.stack(
                [
                    product_singular_values(b.W_V, jnp.swapaxes(b.W_O, -1, -2))
                    for b in blocks
                ]
            )
        return out


def probe_unigram_loss(tokens, d_vocab: int) -> Float[Array, ""]:
    """Cross-entropy of the last tokens under the add-one smoothed frequencies of
    the context tokens ``tokens[:, :-1]`` (the unigram predictor of the probe):
    the reference of the stage rules' information gate (``unigram_gap`` is a
    loss on the same last tokens minus this), read on the probe itself, since
    the targets' own composition moves a held-out loss by more than the gate."""
    tokens = jnp.asarray(tokens)
    counts = jnp.bincount(tokens[:, :-1].ravel(), length=d_vocab) + 1.0
    logp = jnp.log(counts / jnp.sum(counts))
    return -jnp.mean(logp[tokens[:, -1]])
