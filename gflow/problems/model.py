"""The one-layer attention model of MODEL.md §2 (unbatched)."""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.typing import DTypeLike
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray


@functools.partial(jax.jit, static_argnames=("d", "m", "dtype"))
def _draw_weights(key, init_scale, *, d: int, m: int, dtype):
    """(W_E, W_Q, W_K, W_P), every entry N(0, init_scale²), in one program.

    Drawn op by op they were about ten small programs, each compiled (or looked up)
    on its own: a third of a second of every ``gflow flow`` (issue 12). The values
    are the same bits.
    """
    kE, kQ, kK, kP = jax.random.split(key, 4)
    shapes = ((kE, (d, m)), (kQ, (m, m)), (kK, (m, m)), (kP, (m, d)))
    # the barrier keeps XLA from folding the scale into the normal's own constants,
    # which changed the last bit against drawing and scaling op by op
    normals = jax.lax.optimization_barrier(
        tuple(jax.random.normal(k, s, dtype=dtype) for k, s in shapes)
    )
    return tuple(init_scale * x for x in normals)


class AttentionModel(eqx.Module):
    """One attention layer with embedding, projection and a factorised W_A.

    The last position attends to every position of the context; the output is the
    attention-weighted sum of the context embeddings, projected back to the vocabulary.
    There is no value matrix, MLP, LayerNorm or positional encoding (MODEL.md §1).

    Fields (JAX arrays; NumPy arrays in a model read back from a run's files):
        W_E: embedding, [d, m].
        W_Q: query factor of W_A = W_Q W_Kᵀ, [m, m]; the whole W_A when ``W_K`` is None.
        W_K: key factor, [m, m], or None for the unfactorised variant. The unfactorised
            form is an option for ablations: it removes the unigram plateau and merges
            stages I and II, so it is not the default.
        W_P: projection (unembedding), [m, d].
        tau: softmax scale of the attention scores (1 by default, or 1/√m).
        residual: add the query token's own embedding to the attention output. This is
            an ablation: the bigram is then learned through W_E W_P and attention never
            grows (MODEL.md §1).
    """

    W_E: Float[ArrayLike, "d m"]
    W_Q: Float[ArrayLike, "m m"]
    W_K: Float[ArrayLike, "m m"] | None
    W_P: Float[ArrayLike, "m d"]
    tau: float = eqx.field(static=True, default=1.0)
    residual: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        d, m = self.W_E.shape
        if self.W_P.shape != (m, d):
            raise ValueError(f"W_P must have shape {(m, d)} to match W_E {(d, m)}")
        if self.W_Q.shape != (m, m):
            raise ValueError(f"W_Q must have shape {(m, m)}, got {self.W_Q.shape}")
        if self.W_K is not None and self.W_K.shape != (m, m):
            raise ValueError(f"W_K must have shape {(m, m)}, got {self.W_K.shape}")
        if not self.tau > 0:
            raise ValueError(f"tau must be positive, got {self.tau}")

    @classmethod
    def init(
        cls,
        *,
        d_vocab: int,
        d_model: int,
        init_scale: float = 1e-3,
        key: PRNGKeyArray,
        tau: float | str = 1.0,
        factorised: bool = True,
        residual: bool = False,
        dtype: DTypeLike | None = None,
    ) -> AttentionModel:
        """Draw every entry i.i.d. N(0, init_scale²).

        Args:
            d_vocab: vocabulary size d.
            d_model: width m.
            init_scale: standard deviation ε of every entry.
            key: PRNG key.
            tau: softmax scale, a positive number or ``"inv_sqrt_m"`` for 1/√m.
            factorised: store W_A as W_Q W_Kᵀ (default) or as one m×m matrix.
            residual: the residual-connection ablation.
            dtype: float dtype of the weights (default: JAX's default float).
        """
        if d_vocab < 2:
            raise ValueError(f"d_vocab must be at least 2, got {d_vocab}")
        if d_model < 1:
            raise ValueError(f"d_model must be at least 1, got {d_model}")
        if not init_scale > 0:
            raise ValueError(f"init_scale must be positive, got {init_scale}")
        if tau == "inv_sqrt_m":
            tau = 1.0 / math.sqrt(d_model)
        dtype = jnp.dtype(dtype or jnp.zeros(()).dtype)
        W_E, W_Q, W_K, W_P = _draw_weights(
            key, init_scale, d=d_vocab, m=d_model, dtype=dtype
        )
        return cls(
            W_E=W_E,
            W_Q=W_Q,
            W_K=W_K if factorised else None,
            W_P=W_P,
            tau=float(tau),
            residual=residual,
        )

    @property
    def d_vocab(self) -> int:
        return self.W_E.shape[0]

    @property
    def d_model(self) -> int:
        return self.W_E.shape[1]

    @property
    def W_A(self) -> Float[ArrayLike, "m m"]:
        """The attention matrix W_Q W_Kᵀ (or the stored W_A when unfactorised)."""
        return self.W_Q if self.W_K is None else self.W_Q @ self.W_K.T

    @property
    def M(self) -> Float[ArrayLike, "d d"]:
        """Token-to-logit map W_E W_P: row k is token k's contribution to the logits."""
        return self.W_E @ self.W_P

    @property
    def Phi(self) -> Float[ArrayLike, "d d"]:
        """Attention scores between token types, W_E W_A W_Eᵀ (before τ)."""
        return self.W_E @ self.W_A @ self.W_E.T

    def attention(self, context: Int[Array, " s"]) -> Float[Array, "s s"]:
        """Causal attention rows on ``context``: row q holds query position q's
        weights on positions 0..q (zeros after q).

        The last row is the one the model's output uses; row q is what it would use
        with the context cut after position q (the stage monitor reads every row).
        """
        emb = self.W_E[context]  # [s, m]
        scores = self.tau * (emb @ self.W_A) @ emb.T  # [s, s]
        s = context.shape[0]
        causal = jnp.tril(jnp.ones((s, s), dtype=bool))
        return jax.nn.softmax(scores, axis=-1, where=causal)

    def attention_singular_values(self) -> Float[Array, "1 1 m"]:
        """Singular values of W_A, decreasing, as one layer with one head."""
        return jnp.linalg.svd(self.W_A, compute_uv=False)[None, None, :]

    def causal_logits(self, context: Int[Array, " s"]) -> Float[Array, "s d"]:
        """The logits of the next token at every position of ``context``: row q
        is the model's output on the context cut after position q (its last row
        is ``self(context)``)."""
        emb = self.W_E[context]  # [s, m]
        out = self.attention(context) @ emb  # [s, m]
        if self.residual:
            out = out + emb
        return out @ self.W_P

    def features(self, context: Int[Array, " s"]) -> Float[Array, " m"]:
        """The last position's output before W_P (attention, plus the query on the
        residual stream): ``self(context) == self.features(context) @ self.W_P``."""
        emb = self.W_E[context]  # [s, m]
        query = emb[-1]  # [m]
        scores = self.tau * (query @ self.W_A) @ emb.T  # [s]
        attn = jax.nn.softmax(scores)
        out = attn @ emb  # [m]
        if self.residual:
            out = out + query
        return out

    def __call__(self, context: Int[Array, " s"]) -> Float[Array, " d"]:
        """Logits for the token after ``context`` from gathered embeddings (§2)."""
        return self.features(context) @ self.W_P
