"""Observables recorded along runs: functions of the model, evaluated inside jit.

An observable is any callable ``model -> array``; runs take a dict of them (or one
callable returning a dict) and save each at the saved times next to the loss and the
gradient norm. Prefer eqx.Modules over lambdas: their arrays are traced, so a new
instance does not trigger a recompilation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .losses import population_attention

Observable = Callable[..., Array]


def gradient_norm(loss_fn, model) -> Float[Array, ""]:
    """|∇L| over all floating-point leaves of the model."""
    grads = eqx.filter_grad(loss_fn)(model)
    leaves = jax.tree.leaves(eqx.filter(grads, eqx.is_inexact_array))
    return jnp.sqrt(sum(jnp.sum(g**2) for g in leaves))


def evaluate_metrics(loss_fn, observables: Mapping[str, Observable] | None, model):
    """The loss, the gradient norm and every observable at ``model``.

    ``observables`` is a dict name -> ``fn(model)``, or one callable (an eqx.Module,
    say) that returns such a dict.
    """
    out = {"loss": loss_fn(model), "grad_norm": gradient_norm(loss_fn, model)}
    if observables is None:
        return out
    if isinstance(observables, Mapping):
        extra = {name: fn(model) for name, fn in observables.items()}
    else:
        extra = observables(model)
    for name, value in extra.items():
        if name in out:
            raise ValueError(f"observable name {name!r} is reserved")
        out[name] = value
    return out


def singular_values(W: Float[Array, "a b"]) -> Float[Array, " k"]:
    """Singular values of W in decreasing order."""
    return jnp.linalg.svd(W, compute_uv=False)


def entropy(p: Float[Array, "... n"], axis: int = -1) -> Float[Array, "..."]:
    """Shannon entropy (nats) along ``axis``, with 0 log 0 = 0."""
    safe = jnp.where(p > 0, p, 1.0)
    return -jnp.sum(jnp.where(p > 0, p * jnp.log(safe), 0.0), axis=axis)


def attention_entropy(model, pi) -> Float[Array, ""]:
    """π-weighted entropy Σ_i π_i H(a_i·) of the population attention matrix."""
    pi = jnp.asarray(pi, dtype=model.W_E.dtype)
    return jnp.sum(pi * entropy(population_attention(model, pi)))


class MarkovObservables(eqx.Module):
    """The default observables of a Markov population run (used by ``gflow flow``).

    Calling it on a model gives the π-weighted attention entropy, the d×d population
    attention matrix, its column on the most frequent token, and the singular values
    of W_E, W_P and W_A. As a Module its π is traced, so a new chain does not recompile.
    """

    pi: Array

    def __init__(self, chain):
        self.pi = jnp.asarray(chain.pi)

    def __call__(self, model) -> dict[str, Array]:
        pi = self.pi.astype(model.W_E.dtype)
        attn = population_attention(model, pi)
        return {
            "attention_entropy": jnp.sum(pi * entropy(attn)),
            "attention": attn,
            "attention_on_top": attn[:, jnp.argmax(pi)],
            "sv_W_E": singular_values(model.W_E),
            "sv_W_P": singular_values(model.W_P),
            "sv_W_A": singular_values(model.W_A),
        }
