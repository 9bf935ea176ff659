"""The monitor's observation: one jitted call on the probe batch.

``probe_signals(model, observables, n_sv)`` gives the per-head observables of
``HeadObservables`` for any attending model (``gflow.analysis.attending``), reduced
from its attention by the framework-free ``gflow.monitor.reduce`` arithmetic inside
this jitted call (on the device), each family of singular values cut to its
``n_sv`` largest, the probe ``loss``: the mean cross-entropy of
``model(tokens[n, :-1])`` against ``tokens[n, -1]``, and ``unigram_gap``: that loss
minus the loss of the probe's unigram prediction (the frequencies of the probe's
context tokens, add-one smoothed), which the stage rules read to tell a run whose
attention carries information about the next token from one on i.i.d. data, and
``top_dominance``: the probe's top token over the next (the paper's cycle-1 focus
is defined only where it is at least ``min_dominance``).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from gflow.analysis.attending import Attending, attention_rows
from gflow.analysis.head_observables import HeadObservables, probe_unigram_loss
from gflow.monitor.reduce import reduce_attention

__all__ = ["probe_loss", "probe_signals", "probe_unigram_loss"]


def probe_loss(model: Attending, tokens) -> Float[Array, ""]:
    """Mean next-token cross-entropy of the model's last position on the probe."""
    logits = jax.vmap(model)(tokens[:, :-1])  # [b, d]
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, tokens[:, -1:], axis=-1))


@eqx.filter_jit
def probe_signals(
    model: Attending, observables: HeadObservables, n_sv: int
) -> dict[str, Float[Array, "..."]]:
    contexts = observables.tokens[:, :-1]  # [b, s]
    attn = jax.vmap(lambda c: attention_rows(model, c))(contexts)  # [b, l, h, r, s]
    out = reduce_attention(
        jnp,
        jnp.moveaxis(attn, 0, 2),  # [l, h, b, r, s]
        contexts,
        observables.top,
        observables.tracked,
    )
    # the singular values only: XLA drops the attention part it does not return
    sv = {k: v for k, v in observables(model).items() if k.startswith("sv_")}
    out.update({k: v[..., :n_sv] for k, v in sv.items()})
    out["loss"] = probe_loss(model, observables.tokens)
    d_vocab = jax.eval_shape(model, contexts[0]).shape[-1]
    out["unigram_gap"] = out["loss"] - probe_unigram_loss(observables.tokens, d_vocab)
    # recorded so that the offline rules, reading the monitor's directory, apply
    # the same frequent-token condition as the online ones
    out["top_dominance"] = observables.dominance.astype(out["loss"].dtype)
    return out
