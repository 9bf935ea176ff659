"""The small protocol through which the per-head observables and the stage monitor
read a model.

A model is *attending* when it has

- ``model(context)``: the logits [d] of the token after ``context`` (int [s]);
- ``model.attention(context)``: its attention weights on ``context``, one of
  [s] (the last position's row: one layer, one head), [s, s] (causal rows: row q
  holds query position q's weights) or [l, h, s, s] (every layer's and head's
  causal rows);

and optionally ``model.attention_singular_values()``: the singular values [l, h, k]
of every head's W_A,h = W_Q,h W_K,hᵀ, decreasing (asymmetry lifting is read from
them; without it that stage is not detected).

``gflow.AttentionModel`` ([s, s]), ``gflow.Transformer`` ([l, h, s, s]) and
``gflow.PositionalAttentionModel`` ([s]) are attending, and so is any model of a
user's that provides the two methods.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import jax.numpy as jnp
from jaxtyping import Array, Float, Int


@runtime_checkable
class Attending(Protocol):
    """A model with logits and attention weights (module docstring)."""

    def __call__(self, context: Int[Array, " s"]) -> Float[Array, " d"]: ...

    def attention(self, context: Int[Array, " s"]) -> Float[Array, "..."]: ...


def check_attending(model) -> None:
    """Raise a TypeError that says what is missing when ``model`` is not attending."""
    if not isinstance(model, Attending):
        raise TypeError(
            f"{type(model).__name__} is not an attending model: it needs "
            "model(context) -> logits [d] and model.attention(context) -> [s], "
            "[s, s] or [layers, heads, s, s] (gflow.analysis.attending)"
        )


def attention_rows(
    model: Attending, context: Int[Array, " s"]
) -> Float[Array, "l h r s"]:
    """The model's attention on ``context`` as [layers, heads, r, s]: the rows of the
    last r query positions (r = 1 for a model that gives the last row only, r = s for
    causal rows)."""
    a = jnp.asarray(model.attention(context))
    s = context.shape[0]
    if a.shape == (s,):
        return a[None, None, None, :]
    if a.shape == (s, s):
        return a[None, None]
    if a.ndim == 4 and a.shape[-2:] == (s, s):
        return a
    raise ValueError(
        f"{type(model).__name__}.attention(context of {s} tokens) has shape "
        f"{a.shape}; expected [{s}], [{s}, {s}] or [layers, heads, {s}, {s}]"
    )


def head_singular_values(model: Attending) -> Float[Array, "l h k"] | None:
    """``model.attention_singular_values()`` [l, h, k], or None when the model does
    not give them."""
    method = getattr(model, "attention_singular_values", None)
    if method is None:
        return None
    sv = jnp.asarray(method())
    if sv.ndim != 3:
        raise ValueError(
            f"{type(model).__name__}.attention_singular_values() must be [layers, "
            f"heads, k], got shape {sv.shape}"
        )
    return sv
