"""An optional learned positional encoding for text, and the loss that uses it.

``PositionalAttentionModel`` is the attention model of MODEL.md §2 with the key and
query embeddings ``W_E[x_j] + W_pos[j]``; with ``W_pos = 0`` it is exactly
``AttentionModel``. It is off by default (the paper's model has no positions).
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from gflow.problems.losses import (
    check_token_ids,
    last_token_loss,
    nan_unless_valid,
    sequence_loss,
)
from gflow.problems.model import AttentionModel
from gflow.problems.transformer import Transformer
from gflow.text.counts import counts_loss, window_log_counts


class PositionalAttentionModel(eqx.Module):
    """``AttentionModel`` plus a learned position embedding added to every token's.

    Fields:
        base: the token model (W_E, W_Q, W_K, W_P, tau, residual).
        W_pos: [s, m], one row per context position (drawn like the other weights).
    """

    base: AttentionModel
    W_pos: Float[ArrayLike, "s m"]

    def __check_init__(self):
        if self.W_pos.ndim != 2 or self.W_pos.shape[1] != self.base.d_model:
            raise ValueError(
                f"W_pos must be [s, {self.base.d_model}], got {self.W_pos.shape}"
            )

    @classmethod
    def init(
        cls, *, context_length: int, key: PRNGKeyArray, **kwargs: Any
    ) -> PositionalAttentionModel:
        """``AttentionModel.init(**kwargs)`` plus W_pos ~ N(0, init_scale²)."""
        k_base, k_pos = jax.random.split(key)
        base = AttentionModel.init(key=k_base, **kwargs)
        scale = kwargs.get("init_scale", 1e-3)
        W_pos = scale * jax.random.normal(
            k_pos, (context_length, base.d_model), dtype=base.W_E.dtype
        )
        return cls(base=base, W_pos=W_pos)

    @property
    def d_vocab(self) -> int:
        return self.base.d_vocab

    @property
    def d_model(self) -> int:
        return self.base.d_model

    def embed(self, context: Int[Array, " s"]) -> Float[Array, "s m"]:
        s = context.shape[0]
        if s > self.W_pos.shape[0]:
            raise ValueError(
                f"context of {s} tokens is longer than W_pos ({self.W_pos.shape[0]})"
            )
        return self.base.W_E[context] + self.W_pos[:s]

    def attention(self, context: Int[Array, " s"]) -> Float[Array, " s"]:
        """The last position's attention over the s positions."""
        emb = self.embed(context)
        scores = self.base.tau * (emb[-1] @ self.base.W_A) @ emb.T  # [s]
        return jax.nn.softmax(scores)

    def attention_singular_values(self) -> Float[Array, "1 1 m"]:
        """Singular values of W_A, decreasing, as one layer with one head."""
        return self.base.attention_singular_values()

    def features(self, context: Int[Array, " s"]) -> Float[Array, " m"]:
        """The last position's output before W_P: ``self(context) ==
        self.features(context) @ self.base.W_P``."""
        emb = self.embed(context)
        out = self.attention(context) @ emb  # [m]
        if self.base.residual:
            out = out + emb[-1]
        return out

    def __call__(self, context: Int[Array, " s"]) -> Float[Array, " d"]:
        return self.features(context) @ self.base.W_P

    def causal_logits(self, context: Int[Array, " s"]) -> Float[Array, "s d"]:
        """Logits at every position; position i attends to positions ≤ i."""
        s = context.shape[0]
        emb = self.embed(context)
        scores = self.base.tau * (emb @ self.base.W_A) @ emb.T  # [s, s]
        mask = jnp.tril(jnp.ones((s, s), dtype=bool))
        attn = jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)
        out = attn @ emb  # [s, m]
        if self.base.residual:
            out = out + emb
        return out @ self.base.W_P


def _cross_entropy(logits, target):
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, target[..., None], axis=-1)[..., 0]


def text_loss(
    model: AttentionModel | PositionalAttentionModel | Transformer,
    tokens: Int[ArrayLike, "b s1"],
    *,
    all_positions: bool = False,
    dense: bool | None = None,
) -> Float[Array, ""]:
    """``gflow.sequence_loss`` for an ``AttentionModel``; the same objective (last
    position, or all positions causally) for a ``PositionalAttentionModel`` or a
    ``gflow.Transformer``.

    Token ids are checked as in ``gflow.sequence_loss``: concrete tokens with an id
    outside 0 .. d_vocab−1 raise a ValueError naming it and its row and position;
    traced tokens (inside jit) give a NaN loss.
    """
    if isinstance(model, AttentionModel):
        return sequence_loss(model, tokens, all_positions=all_positions, dense=dense)
    if dense:  # a model with positions, or a Transformer
        raise ValueError("the d×d form is the one-layer model's: use dense=None/False")
    check_token_ids(tokens, model.d_vocab)
    tokens = jnp.asarray(tokens)
    context = tokens[:, :-1]
    if all_positions:
        logits = jax.vmap(model.causal_logits)(context)
        loss = jnp.mean(_cross_entropy(logits, tokens[:, 1:]))
    elif isinstance(model, PositionalAttentionModel):
        loss = last_token_loss(model, model.base.W_P, context, tokens[:, -1])
    else:
        loss = jnp.mean(_cross_entropy(jax.vmap(model)(context), tokens[:, -1]))
    return nan_unless_valid(loss, tokens, model.d_vocab)


#: The counts form costs O(n·d·m), the gathered form O(n·s·m) plus a scatter of
#: n·s rows: measured (benchmarks/text_loss_cost.py, m = 64, s = 32) the counts form
#: is faster at d = 200 and slower from d = 500 on, hence the crossover d <= 8 s.
COUNTS_MAX_RATIO = 8


class TextLoss(eqx.Module):
    """``loss_fn(model)`` over a fixed batch of windows (the full-batch flow/GD);
    works for both model classes and for a ``gflow.Transformer``. Its arrays are
    traced.

    Given ``d_vocab``, the last-token loss of an ``AttentionModel`` is computed in the
    counts form (``gflow.text.counts``; same value and gradient, dense products
    only) where that is the cheaper form, d <= ``COUNTS_MAX_RATIO``·s (``counts=``
    True/False forces it); otherwise ``text_loss``.

    Construction checks the windows: int [n, s+1], every id >= 0 and, given
    ``d_vocab``, below it (a ValueError naming the id and its row and position).
    Inside jit the windows are traced: an id outside the model's vocabulary makes
    the loss NaN (the run ends ``diverged``).
    """

    tokens: Int[Array, "n s1"]
    log_counts: Float[Array, "n d"] | None
    all_positions: bool = eqx.field(static=True, default=False)
    dense: bool | None = eqx.field(static=True, default=None)

    def __init__(
        self,
        tokens: Int[ArrayLike, "n s1"],
        *,
        d_vocab: int | None = None,
        all_positions: bool = False,
        dense: bool | None = None,
        counts: bool | None = None,
    ):
        if np.ndim(tokens) != 2 or np.shape(tokens)[1] < 2:
            raise ValueError(
                f"tokens must be int [n, s+1] with s >= 1, got {np.shape(tokens)}"
            )
        check_token_ids(tokens, d_vocab)
        self.tokens = jnp.asarray(tokens)
        s = self.tokens.shape[1] - 1
        if counts is None:
            counts = d_vocab is not None and d_vocab <= COUNTS_MAX_RATIO * s
        if counts and d_vocab is None:
            raise ValueError("counts=True needs d_vocab (the vocabulary size)")
        use_counts = counts and not all_positions and dense is None
        self.log_counts = (
            jnp.asarray(window_log_counts(tokens, d_vocab)) if use_counts else None
        )
        self.all_positions = all_positions
        self.dense = dense

    def __call__(
        self, model: AttentionModel | PositionalAttentionModel | Transformer
    ) -> Float[Array, ""]:
        if self.log_counts is not None and isinstance(model, AttentionModel):
            check_token_ids(self.tokens, model.d_vocab)
            loss = counts_loss(model, self.log_counts, self.tokens)
            return nan_unless_valid(loss, self.tokens, model.d_vocab)
        return text_loss(
            model, self.tokens, all_positions=self.all_positions, dense=self.dense
        )
