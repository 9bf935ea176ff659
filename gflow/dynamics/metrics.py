"""What every run records at its saved times: the loss, |∇L| and the observables.

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
from jaxtyping import Array, ArrayLike, Float

from gflow.array_types import LossFn, Model, Observables

Observable = Callable[..., Array]


def gradient_norm(loss_fn: LossFn, model: Model) -> Float[Array, ""]:
    """|∇L| over all floating-point leaves of the model."""
    grads = eqx.filter_grad(loss_fn)(model)
    leaves = jax.tree.leaves(eqx.filter(grads, eqx.is_inexact_array))
    return jnp.sqrt(sum(jnp.sum(g**2) for g in leaves))


def evaluate_metrics(
    loss_fn: LossFn, observables: Observables, model: Model
) -> dict[str, ArrayLike]:
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
