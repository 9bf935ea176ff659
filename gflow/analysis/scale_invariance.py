"""The block of a pre-LayerNorm transformer in which its loss is scale-invariant.

A LayerNorm with eps = 0 returns the same output for x and c·x (c > 0). In a
``Transformer`` with ``layernorm=True`` every read of the residual stream goes
through a LayerNorm, so wherever the stream is the only thing a block of
parameters changes, and it changes it linearly, scaling that block by c scales the
stream by c and leaves the loss unchanged:

- residual stream with value matrices: the stream is W_E[context] (+ W_pos) plus
  every head's write (∝ W_O) plus every MLP's write (∝ W_out, b_out); the block is
  all of them together. (Without value matrices a head writes its attention-
  weighted LayerNorm output, which has a fixed scale: the stream is then not
  linear in any block and the loss is only nearly scale-invariant, through the
  small init.)
- no residual stream: the first layer reads the embeddings only through its
  LayerNorm, so the block is W_E (+ W_pos).

For a loss L with L(c·θ_S) = L(θ_S), Euler's theorem gives ⟨∇_S L, θ_S⟩ = 0: the
gradient flow keeps |θ_S| exactly, while a gradient step θ_S − η g adds η²|g|² to
|θ_S|² (../shared/spec/NOTES.md; van Laarhoven 2017, arXiv:1706.05350; Arora, Li and
Lyu 2019, arXiv:1812.03981). With eps > 0 the invariance holds only while the
LayerNorm inputs' spread is large against √eps.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PyTree

from gflow.problems.transformer import Transformer

__all__ = [
    "scale_invariant_mask",
    "scale_invariant_norm",
    "layernorm_eps_zero",
    "layernorm_sigmas",
    "smallest_layernorm_sigma",
]


def scale_invariant_mask(model: Transformer) -> PyTree:
    """A pytree of bools shaped like ``model``: True on the leaves of the block in
    which the loss is scale-invariant at eps = 0 (the module docstring says which).

    Raises ValueError for a model without LayerNorm, or with a residual stream
    but no value matrices (no exactly invariant block)."""
    if not isinstance(model, Transformer):
        raise TypeError(f"expected a gflow Transformer, got {type(model).__name__}")
    if model.ln_final is None:
        raise ValueError(
            "the model has no LayerNorm (layernorm=False): its loss is not "
            "scale-invariant in any block"
        )
    if model.residual and any(b.W_O is None for b in model.blocks):
        raise ValueError(
            "a residual stream without value matrices (value=False): each head "
            "writes a LayerNorm output of fixed scale, so no block scales the "
            "stream; the loss is only nearly scale-invariant"
        )
    mask = jax.tree_util.tree_map(lambda _: False, model)

    def on(m, where):
        return eqx.tree_at(where, m, replace_fn=lambda _: True)

    mask = on(mask, lambda m: m.W_E)
    if model.W_pos is not None:
        mask = on(mask, lambda m: m.W_pos)
    if model.residual:
        for i, block in enumerate(model.blocks):
            mask = on(mask, lambda m, i=i: m.blocks[i].W_O)
            if block.mlp is not None:
                mask = on(mask, lambda m, i=i: m.blocks[i].mlp.W_out)
                mask = on(mask, lambda m, i=i: m.blocks[i].mlp.b_out)
    return mask


def scale_invariant_norm(model: Transformer) -> Float[Array, ""]:
    """The Euclidean norm of the scale-invariant block (``scale_invariant_mask``)."""
    mask = scale_invariant_mask(model)
    leaves = jax.tree_util.tree_leaves(
        jax.tree_util.tree_map(
            lambda x, on: jnp.sum(jnp.square(x)) if on else jnp.zeros(()),
            model,
            mask,
        )
    )
    return jnp.sqrt(sum(leaves))


def layernorm_eps_zero(model: Transformer) -> Transformer:
    """The same model with every LayerNorm's eps set to 0 (exact invariance)."""
    where = [model.ln_final] + [
        ln for b in model.blocks for ln in (b.ln_attn, b.ln_mlp) if ln is not None
    ]
    if model.ln_final is None:
        raise ValueError("the model has no LayerNorm (layernorm=False)")
    return eqx.tree_at(
        lambda m: (
            [m.ln_final]
            + [ln for b in m.blocks for ln in (b.ln_attn, b.ln_mlp) if ln is not None]
        ),
        model,
        [type(ln)(ln.gain, ln.bias, eps=0.0) for ln in where],
    )


def layernorm_sigmas(model: Transformer, contexts) -> Float[Array, " n"]:
    """The smallest spread σ (the standard deviation over the width, which a
    LayerNorm divides by as sqrt(σ² + eps)) of each LayerNorm's input of
    ``model`` over the int contexts [b, s], in the model's order: each block's
    attention LayerNorm, then its MLP's (where it has one), at every position;
    last the final LayerNorm at the last position (the only one the
    last-position loss reads). Where σ falls below sqrt(eps) the LayerNorm is
    nearly linear and its Hessian grows like 1/(σ² + eps): the stiffness of the
    pre-LN flow (docs/integrators.md). Empty for a model without LayerNorm."""
    if not isinstance(model, Transformer):
        raise TypeError(f"expected a gflow Transformer, got {type(model).__name__}")
    if model.ln_final is None:
        return jnp.zeros((0,))

    def spread(x):
        return jnp.sqrt(jnp.var(x, axis=-1))

    def one(context):
        x = model.W_E[context]
        if model.W_pos is not None:
            x = x + model.W_pos[: context.shape[0]]
        sig = []
        for block in model.blocks:
            if block.ln_attn is not None:
                sig.append(jnp.min(spread(x)))
            if block.ln_mlp is not None:  # the stream the MLP's LayerNorm reads
                attn_only = eqx.tree_at(lambda b: b.mlp, block, None)
                mid, _ = attn_only(x, model.tau, model.residual)
                sig.append(jnp.min(spread(mid)))
            x, _ = block(x, model.tau, model.residual)
        sig.append(spread(x[-1]))
        return jnp.stack(sig)

    return jnp.min(jax.vmap(one)(jnp.asarray(contexts)), axis=0)


def smallest_layernorm_sigma(model: Transformer, contexts) -> Float[Array, ""]:
    """The smallest of ``layernorm_sigmas``: the smallest spread any LayerNorm of
    ``model`` reads on ``contexts``; inf for a model without LayerNorm."""
    sig = layernorm_sigmas(model, contexts)
    return jnp.min(sig) if sig.size else jnp.asarray(jnp.inf)
