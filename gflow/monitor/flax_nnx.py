"""The stage monitor for Flax ``nnx`` models.

::

    from gflow.monitor.flax_nnx import FlaxMonitor

    monitor = FlaxMonitor("runs/monitor", every=10)
    for step in range(steps):
        loss = train_step(model, optimizer, next(batches))    # an nnx.jit step
        monitor.observe(step, model, probe)                   # probe: int [b, s+1]
    monitor.close()

``FlaxMonitor`` is a ``gflow.Monitor`` whose ``observe`` takes an ``nnx.Module``
that maps contexts int [b, s] to logits [b, s, V] or [b, V]. Each observation is
one jitted probe pass on a copy of the model (``nnx.split``/``nnx.merge``; the
training model is not touched): every ``nnx.MultiHeadAttention`` in it is made to
sow its attention weights (its ``attention_fn`` is given the module, as
``sow_weights=True`` does), any module of one's own may sow ``attention_weights``
too, and ``nnx.capture`` collects them, in module order, as [b, h, s, s] each. The
model is called in evaluation mode (``nnx.view(model, deterministic=True)`` where
a module has that attribute). The query and key kernels of the
``nnx.MultiHeadAttention`` layers, [m, h, k] each, give ``sv_W_A``. The reduction
runs on the host through ``gflow.monitor.Probe`` as for the other frameworks.
"""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import ArrayLike, Int

from gflow.analysis.stage import Stage
from gflow.monitor.monitor import Monitor
from gflow.monitor.probe import AttentionReading

__all__ = ["FlaxMonitor", "attention_reading"]

_SOWN = "attention_weights"  # the name nnx.MultiHeadAttention sows under


def _sowing(attention_fn, layer, *args, **kwargs):
    kwargs["module"] = layer
    return attention_fn(*args, **kwargs)


def _attention_layers(model) -> list:
    return [
        m for _, m in nnx.iter_modules(model) if isinstance(m, nnx.MultiHeadAttention)
    ]


@functools.partial(jax.jit, static_argnums=0)
def _probe_pass(graphdef, state, contexts):
    model = nnx.merge(graphdef, state)
    try:
        model = nnx.view(model, deterministic=True, raise_if_not_found=False)
    except TypeError:  # no module has the attribute
        pass
    for m in _attention_layers(model):
        m.attention_fn = functools.partial(_sowing, m.attention_fn, m)
    output, sown = nnx.capture(model, nnx.Intermediate)(contexts)
    weights = [
        jnp.stack(list(value)) if isinstance(value, tuple) else value[None]
        for path, value in sorted(_flat(sown))
        if path[-1] == _SOWN
    ]
    logits = output.logits if hasattr(output, "logits") else output
    if isinstance(logits, tuple):
        logits = logits[0]
    return weights, logits


def _flat(state) -> list:
    """(path, value) of every leaf of an ``nnx.State`` (values of Variables)."""
    out = []
    for path, leaf in nnx.to_flat_state(state):
        value = leaf.get_value() if hasattr(leaf, "get_value") else leaf
        out.append((tuple(str(p) for p in path), value))
    return out


class FlaxMonitor(Monitor):
    """A ``gflow.Monitor`` for ``flax.nnx`` models (module docstring).

    Args: as ``Monitor``.
    """

    def __init__(self, out: str | os.PathLike, every: int = 10, **kwargs):
        super().__init__(out, every, **kwargs)

    def observe(
        self,
        step: int,
        model: nnx.Module,
        tokens: Int[ArrayLike, "b s1"],
        t: float | None = None,
    ) -> list[Stage]:
        """Observe the nnx ``model`` at ``step`` (when ``every`` divides it) on the
        probe ``tokens`` [b, s+1]; as ``Monitor.observe``."""
        if not self._due(step):
            return []
        if not isinstance(model, nnx.Module):
            raise TypeError(f"model must be an nnx.Module, got {type(model).__name__}")
        tokens = np.asarray(tokens)
        reading = attention_reading(model, tokens[:, :-1])
        probe = self.probe_for(tokens, reading.logits.shape[-1])
        signals = probe.read(reading, n_sv=self.n_sv)
        return self.record(step, signals, t, probe=probe)


def attention_reading(
    model: nnx.Module, contexts: Int[ArrayLike, "b s"]
) -> AttentionReading:
    """The attention [l, h, b, s, s], last logits [b, V] and query/key kernels of
    one jitted probe pass of ``contexts`` (module docstring)."""
    graphdef, state = nnx.split(model)
    weights, logits = _probe_pass(graphdef, state, jnp.asarray(contexts))
    if not weights:
        raise ValueError(
            f"{type(model).__name__} has no nnx.MultiHeadAttention and sows no "
            f"'{_SOWN}': nothing to observe"
        )
    # each sown value [calls, b, h, s, s]: one call per layer in a forward pass
    layers = [np.asarray(w, dtype=float).reshape(-1, *w.shape[-4:]) for w in weights]
    logits = np.asarray(logits, dtype=float)
    return AttentionReading(
        attention=np.swapaxes(np.concatenate(layers), 1, 2),  # [l, h, b, s, s]
        logits=logits[:, -1] if logits.ndim == 3 else logits,
        qk=_projections(model),
    )


def _projections(model) -> tuple[np.ndarray, np.ndarray] | None:
    """W_Q, W_K [layers, heads, m, k] from the layers' query/key kernels."""
    layers = _attention_layers(model)
    if not layers:
        return None
    W_Q = [np.asarray(m.query.kernel.get_value()) for m in layers]  # [m, h, k]
    W_K = [np.asarray(m.key.kernel.get_value()) for m in layers]
    if len({w.shape for w in W_Q + W_K}) != 1:
        return None
    return (
        np.stack([w.transpose(1, 0, 2) for w in W_Q]),
        np.stack([w.transpose(1, 0, 2) for w in W_K]),
    )
