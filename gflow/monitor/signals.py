"""The monitor's observation: one jitted call on the probe batch.

``probe_signals(model, observables, n_sv)`` gives the per-head observables of
``HeadObservables`` (for any attending model, ``gflow.analysis.attending``), each
family of singular values cut to its ``n_sv`` largest, and the probe ``loss``: the
mean cross-entropy of ``model(tokens[n, :-1])`` against ``tokens[n, -1]``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from gflow.analysis.attending import Attending
from gflow.analysis.head_observables import HeadObservables


def probe_loss(model: Attending, tokens) -> Float[Array, ""]:
    """Mean next-token cross-entropy of the model's last position on the probe."""
    logits = jax.vmap(model)(tokens[:, :-1])  # [b, d]
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, tokens[:, -1:], axis=-1))


@eqx.filter_jit
def probe_signals(
    model: Attending, observables: HeadObservables, n_sv: int
) -> dict[str, Float[Array, "..."]]:
    out = observables(model)
    out = {k: v[..., :n_sv] if k.startswith("sv_") else v for k, v in out.items()}
    out["loss"] = probe_loss(model, observables.tokens)
    return out
