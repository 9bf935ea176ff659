"""A causal multi-layer, multi-head transformer (unbatched) for flows and optimizers.

The one-layer ``AttentionModel`` is the special case with one layer, one head, no
value matrix, no MLP, no LayerNorm, no positions (``Transformer.from_attention_model``
gives the same function exactly). With x₀ = W_E[context] (+ W_pos), each layer l is

    a_h   = softmax(τ · mask(LN(x) W_Q,h W_K,hᵀ LN(x)ᵀ))          [s, s] per head h
    y     = (1/H) Σ_h a_h LN(x)                     (no value matrix)
          = Σ_h a_h LN(x) W_V,h W_O,h              (``value=True``)
    x     = x + y  (``residual``)  or  x = y
    x     = x + MLP(LN(x))  or  MLP(LN(x))         (``d_ff``: GeLU, one hidden layer)

and the logits are LN(x) W_P. LN is a learned pre-LayerNorm when ``layernorm`` is on,
the identity otherwise. The mask is causal: position i attends to positions ≤ i.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.typing import DTypeLike
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from gflow.problems.model import AttentionModel


def product_singular_values(
    A: Float[ArrayLike, "*h m k"], B: Float[ArrayLike, "*h m k"], xp=jnp
) -> Float[ArrayLike, "*h k"]:
    """Singular values of A Bᵀ (m × m, rank ≤ k ≤ m) per leading index, decreasing.

    With A = Q_A R_A and B = Q_B R_B (reduced QR, Q with orthonormal columns),
    A Bᵀ = Q_A (R_A R_Bᵀ) Q_Bᵀ has the singular values of the k × k R_A R_Bᵀ.
    ``xp``: the array namespace, ``jax.numpy`` or ``numpy`` (the monitor's host
    path for other frameworks' weights).
    """
    R_A = xp.linalg.qr(A, mode="r")
    R_B = xp.linalg.qr(B, mode="r")
    return xp.linalg.svd(R_A @ xp.swapaxes(R_B, -1, -2), compute_uv=False)


class LayerNorm(eqx.Module):
    """Normalise the last axis to mean 0 and variance 1, then scale and shift."""

    gain: Float[Array, " m"]
    bias: Float[Array, " m"]
    eps: float = eqx.field(static=True, default=1e-5)

    def __call__(self, x: Float[ArrayLike, "*s m"]) -> Float[Array, "*s m"]:
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.var(x, axis=-1, keepdims=True)
        return (x - mean) / jnp.sqrt(var + self.eps) * self.gain + self.bias


class MLP(eqx.Module):
    """x ↦ GeLU(x W_in + b_in) W_out + b_out, one hidden layer of width d_ff."""

    W_in: Float[Array, "m f"]
    b_in: Float[Array, " f"]
    W_out: Float[Array, "f m"]
    b_out: Float[Array, " m"]

    def __call__(self, x: Float[ArrayLike, "s m"]) -> Float[Array, "s m"]:
        return jax.nn.gelu(x @ self.W_in + self.b_in) @ self.W_out + self.b_out


class Block(eqx.Module):
    """One layer: H attention heads (optionally with values), then an optional MLP.

    Fields:
        W_Q, W_K: query and key maps of every head, [H, m, k] (k = m / H).
        W_V, W_O: value and output maps, [H, m, k] and [H, k, m], or None (no value
            matrix: each head returns its attention-weighted input, averaged).
        ln_attn, ln_mlp: pre-LayerNorms, or None.
        mlp: the MLP, or None.
    """

    W_Q: Float[Array, "h m k"]
    W_K: Float[Array, "h m k"]
    W_V: Float[Array, "h m k"] | None
    W_O: Float[Array, "h k m"] | None
    ln_attn: LayerNorm | None
    ln_mlp: LayerNorm | None
    mlp: MLP | None

    @property
    def n_heads(self) -> int:
        return self.W_Q.shape[0]

    def attention(
        self, x: Float[ArrayLike, "s m"], tau: float
    ) -> Float[Array, "h s s"]:
        """The causal attention weights of every head on the stream ``x``."""
        z = x if self.ln_attn is None else self.ln_attn(x)
        q = jnp.einsum("sm,hmk->hsk", z, self.W_Q)
        k = jnp.einsum("sm,hmk->hsk", z, self.W_K)
        scores = tau * jnp.einsum("hik,hjk->hij", q, k)  # [h, s, s]
        s = x.shape[0]
        mask = jnp.tril(jnp.ones((s, s), dtype=bool))
        return jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)

    def __call__(
        self, x: Float[ArrayLike, "s m"], tau: float, residual: bool
    ) -> tuple[Float[Array, "s m"], Float[Array, "h s s"]]:
        """The stream after this layer, and the heads' attention weights."""
        attn = self.attention(x, tau)
        z = x if self.ln_attn is None else self.ln_attn(x)
        if self.W_V is None:
            y = jnp.einsum("hij,jm->im", attn, z) / self.n_heads
        else:
            v = jnp.einsum("sm,hmk->hsk", z, self.W_V)
            y = jnp.einsum("hij,hjk,hkm->im", attn, v, self.W_O)
        x = x + y if residual else y
        if self.mlp is not None:
            f = self.mlp(x if self.ln_mlp is None else self.ln_mlp(x))
            x = x + f if residual else f
        return x, attn


class Transformer(eqx.Module):
    """A causal transformer over token ids: embedding, layers, unembedding.

    ``model(context)`` gives the logits of the token after ``context`` (the last
    position, the paper's objective); ``model.causal_logits(context)`` the logits at
    every position; ``model.attention(context)`` the attention weights
    ``[n_layers, n_heads, s, s]``.

    Fields:
        W_E: embedding [d, m]; W_pos: learned positions [max_len, m] or None.
        blocks: the layers, a tuple of ``Block``.
        ln_final: the LayerNorm before the unembedding, or None.
        W_P: unembedding [m, d].
        tau: softmax scale of the attention scores.
        residual: residual streams (``x + layer(x)``) or none (``layer(x)``).
    """

    W_E: Float[Array, "d m"]
    W_pos: Float[Array, "p m"] | None
    blocks: tuple[Block, ...]
    ln_final: LayerNorm | None
    W_P: Float[Array, "m d"]
    tau: float = eqx.field(static=True, default=1.0)
    residual: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        d, m = self.W_E.shape
        if self.W_P.shape != (m, d):
            raise ValueError(f"W_P must have shape {(m, d)} to match W_E {(d, m)}")
        if not self.blocks:
            raise ValueError("a Transformer needs at least one layer")
        if not self.tau > 0:
            raise ValueError(f"tau must be positive, got {self.tau}")

    @classmethod
    def init(
        cls,
        *,
        d_vocab: int,
        d_model: int,
        n_layers: int = 1,
        n_heads: int = 1,
        key: PRNGKeyArray,
        init_scale: float = 1e-3,
        d_ff: int | None = None,
        value: bool = False,
        layernorm: bool = False,
        residual: bool = False,
        max_len: int | None = None,
        tau: float | str = 1.0,
        dtype: DTypeLike | None = None,
    ) -> Transformer:
        """Draw every weight i.i.d. N(0, init_scale²); LayerNorms start at gain 1,
        bias 0, and the MLP biases at 0.

        Args:
            d_vocab: vocabulary size d (>= 2).
            d_model: width m, a multiple of ``n_heads`` (head width k = m / H).
            n_layers, n_heads: depth L >= 1 and heads per layer H >= 1.
            key: PRNG key.
            init_scale: standard deviation ε of every weight.
            d_ff: hidden width of a GeLU MLP after each attention, or None (no MLP).
            value: a value and an output matrix per head.
            layernorm: pre-LayerNorm before attention, MLP and unembedding.
            residual: residual streams.
            max_len: learned positional embeddings for contexts up to this length,
                or None (no positions, as the one-layer model).
            tau: softmax scale, a positive number or ``"inv_sqrt_m"`` (1/√k).
            dtype: float dtype of the weights (default: JAX's default float).
        """
        checks = {
            "d_vocab": (d_vocab, 2),
            "d_model": (d_model, 1),
            "n_layers": (n_layers, 1),
            "n_heads": (n_heads, 1),
        }
        for name, (value_, least) in checks.items():
            if not isinstance(value_, int) or value_ < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value_}")
        if d_model % n_heads:
            raise ValueError(
                f"d_model = {d_model} must be a multiple of n_heads = {n_heads}"
            )
        if d_ff is not None and (not isinstance(d_ff, int) or d_ff < 1):
            raise ValueError(f"d_ff must be a positive integer or None, got {d_ff}")
        if max_len is not None and (not isinstance(max_len, int) or max_len < 1):
            raise ValueError(
                f"max_len must be a positive integer or None, got {max_len}"
            )
        if not init_scale > 0:
            raise ValueError(f"init_scale must be positive, got {init_scale}")
        d, m, h = d_vocab, d_model, n_heads
        k = m // h
        if tau == "inv_sqrt_m":
            tau = 1.0 / math.sqrt(k)
        dtype = dtype or jnp.zeros(()).dtype
        keys = iter(jax.random.split(key, 3 + 6 * n_layers))

        def draw(*shape):
            return init_scale * jax.random.normal(next(keys), shape, dtype=dtype)

        def norm():
            return (
                LayerNorm(jnp.ones(m, dtype), jnp.zeros(m, dtype))
                if layernorm
                else None
            )

        blocks = []
        for _ in range(n_layers):
            mlp = None
            if d_ff is not None:
                zeros = jnp.zeros
                mlp = MLP(
                    draw(m, d_ff), zeros(d_ff, dtype), draw(d_ff, m), zeros(m, dtype)
                )
            blocks.append(
                Block(
                    W_Q=draw(h, m, k),
                    W_K=draw(h, m, k),
                    W_V=draw(h, m, k) if value else None,
                    W_O=draw(h, k, m) if value else None,
                    ln_attn=norm(),
                    ln_mlp=norm() if d_ff is not None else None,
                    mlp=mlp,
                )
            )
        return cls(
            W_E=draw(d, m),
            W_pos=draw(max_len, m) if max_len is not None else None,
            blocks=tuple(blocks),
            ln_final=norm(),
            W_P=draw(m, d),
            tau=float(tau),
            residual=residual,
        )

    @classmethod
    def from_attention_model(cls, model: AttentionModel) -> Transformer:
        """The same function as a one-layer ``AttentionModel``, as a Transformer.

        W_A = W_Q W_Kᵀ becomes one head with the same factors (the unfactorised
        W_A becomes W_Q = W_A, W_K = I), and the residual ablation becomes the
        residual stream: x + a·x at the last position is e_q W_E + a·(W_E[context]).
        """
        m = model.d_model
        W_K = model.W_K if model.W_K is not None else jnp.eye(m, dtype=model.W_Q.dtype)
        block = Block(
            W_Q=model.W_Q[None],
            W_K=W_K[None],
            W_V=None,
            W_O=None,
            ln_attn=None,
            ln_mlp=None,
            mlp=None,
        )
        return cls(
            W_E=model.W_E,
            W_pos=None,
            blocks=(block,),
            ln_final=None,
            W_P=model.W_P,
            tau=model.tau,
            residual=model.residual,
        )

    @property
    def d_vocab(self) -> int:
        return self.W_E.shape[0]

    @property
    def d_model(self) -> int:
        return self.W_E.shape[1]

    @property
    def n_layers(self) -> int:
        return len(self.blocks)

    @property
    def n_heads(self) -> int:
        return self.blocks[0].n_heads

    def _stream(self, context: Int[Array, " s"]):
        x = self.W_E[context]  # [s, m]
        if self.W_pos is not None:
            s = context.shape[0]
            if s > self.W_pos.shape[0]:
                raise ValueError(
                    f"context of length {s} is longer than max_len = "
                    f"{self.W_pos.shape[0]}"
                )
            x = x + self.W_pos[:s]
        attns = []
        for block in self.blocks:
            x, attn = block(x, self.tau, self.residual)
            attns.append(attn)
        if self.ln_final is not None:
            x = self.ln_final(x)
        return x, jnp.stack(attns)

    def causal_logits(self, context: Int[Array, " s"]) -> Float[Array, "s d"]:
        """The logits of the next token at every position of ``context``."""
        x, _ = self._stream(context)
        return x @ self.W_P

    def attention(self, context: Int[Array, " s"]) -> Float[Array, "l h s s"]:
        """Every layer's and head's causal attention weights on ``context``."""
        return self._stream(context)[1]

    def attention_singular_values(self) -> Float[Array, "l h k"]:
        """Singular values of every head's W_A,h = W_Q,h W_K,hᵀ, decreasing."""
        return jnp.stack([product_singular_values(b.W_Q, b.W_K) for b in self.blocks])

    def __call__(self, context: Int[Array, " s"]) -> Float[Array, " d"]:
        """The logits of the token after ``context`` (the last position)."""
        x, _ = self._stream(context)
        return x[-1] @ self.W_P
