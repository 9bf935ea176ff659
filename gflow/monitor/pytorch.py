"""The stage monitor in a PyTorch training loop.

::

    from gflow.monitor.pytorch import TorchMonitor

    monitor = TorchMonitor("runs/monitor", every=10)
    for step, batch in enumerate(loader):
        loss = model(batch).loss; loss.backward(); opt.step(); opt.zero_grad()
        monitor.observe(step, model, probe)      # probe: int [b, s+1], fixed
    monitor.close()

``TorchMonitor`` is a ``gflow.Monitor`` whose ``observe`` takes a ``torch.nn.Module``.
At each observed step it runs one separate forward pass of the probe contexts
``probe[:, :-1]`` under ``torch.no_grad()`` with the model in eval mode (its mode is
restored after), reads the attention probabilities, the last position's logits and
the heads' query/key projections with an attention reader, and records the signals
of ``gflow.monitor.Probe`` through ``Monitor.record``: the files, events, callbacks,
TensorBoard and resume of the JAX monitor. The probe pass is outside the training
step, so a step compiled with ``torch.compile`` is left alone (hooks inside a
compiled graph would break it).

Attention readers (strategies):

- ``HuggingFaceAttention``: a ``transformers`` model called with
  ``output_attentions=True``; a model built with a fused kernel (``"sdpa"``, which
  returns no weights) is switched to ``"eager"`` for the probe pass alone. The query
  and key projections are read from GPT-2's ``c_attn`` and from ``q_proj``/``k_proj``
  layers (Llama, OPT, GPT-NeoX-style models); elsewhere ``sv_W_A`` is left out.
- ``MultiheadAttentionHooks``: every ``torch.nn.MultiheadAttention`` in the model,
  in module order, asked for its per-head weights (``need_weights=True,
  average_attn_weights=False``) by a forward pre-hook and read by a forward hook,
  both removed after the pass. The model's output must be logits [b, s, V] or
  [b, V] (or a tuple or object whose first item or ``logits`` is).
- ``AutoAttention`` (the default): the first of the two that fits the model.

A reader gives the attention as one torch tensor [layers, heads, b, s, s] on the
model's device, in its dtype; ``TorchMonitor`` reduces it there with torch
(``torch_signals``: ``reduce_attention``, the arithmetic of
``gflow.attention_signals``), so an observation copies to the host only the
per-head signals, the last logits and the query/key weights. A reader of your own
may give NumPy instead.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import torch
from jaxtyping import ArrayLike, Int

from gflow.analysis.stage import Stage
from gflow.monitor.monitor import Monitor
from gflow.monitor.probe import AttentionReading, Probe
from gflow.monitor.reduce import AttentionSignals, ProbeMasks, reduce_attention

__all__ = [
    "AttentionReading",
    "AutoAttention",
    "HuggingFaceAttention",
    "MultiheadAttentionHooks",
    "TorchMonitor",
    "probe_masks",
    "torch_signals",
]


def _numpy(x: torch.Tensor) -> np.ndarray:
    return x.detach().to("cpu", torch.float64).numpy()


def _stack(attentions: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per-layer weights [b, h, s, s] -> [layers, heads, b, s, s], on their device
    and in their dtype (``TorchMonitor`` reduces them there, in one pass)."""
    return torch.stack([a.detach().transpose(0, 1) for a in attentions])


def torch_signals(
    attention: torch.Tensor, probe: Probe, masks: ProbeMasks | None = None
) -> AttentionSignals:
    """``gflow.attention_signals`` computed by torch on the attention's device and
    in its dtype (``reduce_attention``, the same arithmetic), so that only the
    per-head signals, not the [l, h, b, s, s] weights, are copied to the host;
    ``masks``: ``probe_masks(attention, probe)``, when kept from an earlier call."""
    if masks is None:
        masks = probe_masks(attention, probe)
    out = reduce_attention(torch, attention, None, probe.top, None, masks=masks)
    return AttentionSignals(**{k: _numpy(v) for k, v in out.items()})


def probe_masks(attention: torch.Tensor, probe: Probe) -> ProbeMasks:
    """The probe's ``ProbeMasks`` on the attention's device and in its dtype."""
    device = attention.device
    return ProbeMasks.of(
        torch.tensor(probe.contexts, device=device),
        attention.shape[-2],
        probe.top,
        torch.tensor(probe.tracked, device=device),
        attention.dtype,
    )


def _last_logits(output) -> torch.Tensor:
    """The last position's logits [b, V] from a model's output."""
    logits = getattr(output, "logits", None)
    if logits is None:
        logits = output[0] if isinstance(output, (tuple, list)) else output
    if not isinstance(logits, torch.Tensor) or logits.ndim not in (2, 3):
        raise TypeError(
            "the model's output must be logits [b, s, V] or [b, V] (or a tuple or "
            f"object whose first item or .logits is), got {type(logits).__name__}"
        )
    return logits[:, -1] if logits.ndim == 3 else logits


class AbstractAttentionReader(ABC):
    """How to read attention, logits and projections out of a torch model."""

    @abstractmethod
    def fits(self, model: torch.nn.Module) -> bool:
        """Whether this reader can read ``model``."""

    @abstractmethod
    def read(self, model: torch.nn.Module, contexts: torch.Tensor) -> AttentionReading:
        """One forward pass of ``contexts`` [b, s] (called under no_grad, eval)."""


class HuggingFaceAttention(AbstractAttentionReader):
    """A ``transformers`` model's ``output_attentions`` (module docstring).

    Args:
        switch: a model built with a fused attention (``"sdpa"``, the default of
            recent versions, or a flash kernel), which returns no weights, is
            switched to ``"eager"`` for the probe pass alone and back after it
            (``set_attn_implementation``; the same function, computed
            explicitly), so training keeps its fast kernel. False: refuse such a
            model instead.
    """

    def __init__(self, switch: bool = True):
        self.switch = bool(switch)

    def fits(self, model):
        return hasattr(getattr(model, "config", None), "_attn_implementation")

    def read(self, model, contexts):
        implementation = model.config._attn_implementation
        if implementation == "eager":
            return self._read(model, contexts)
        can_switch = getattr(model, "_can_set_attn_implementation", lambda: False)
        if not (
            self.switch and hasattr(model, "set_attn_implementation") and can_switch()
        ):
            raise ValueError(
                f"the model computes attention with {implementation!r}, which returns "
                "no attention weights, and cannot be switched to eager for the probe "
                'pass; build it with attn_implementation="eager" (e.g. '
                'GPT2Config(..., attn_implementation="eager") or '
                'from_pretrained(..., attn_implementation="eager"))'
            )
        model.set_attn_implementation("eager")
        try:
            return self._read(model, contexts)
        finally:
            model.set_attn_implementation(implementation)

    def _read(self, model, contexts) -> AttentionReading:
        output = model(input_ids=contexts, output_attentions=True)
        attentions = getattr(output, "attentions", None)
        if not attentions or any(a is None for a in attentions):
            raise ValueError("the model returned no attention weights")
        return AttentionReading(
            attention=_stack(attentions),
            logits=_numpy(_last_logits(output)),
            qk=self._projections(model),
        )

    @staticmethod
    def _projections(model) -> tuple[np.ndarray, np.ndarray] | None:
        config = model.config
        heads = getattr(config, "num_attention_heads", None) or getattr(
            config, "n_head", None
        )
        if not heads:
            return None
        W_Q, W_K = [], []
        for module in model.modules():
            c_attn = getattr(module, "c_attn", None)  # GPT-2: x @ W, W [m, 3m]
            q_proj, k_proj = (
                getattr(module, "q_proj", None),
                getattr(module, "k_proj", None),
            )
            if c_attn is not None and hasattr(c_attn, "weight"):
                W = c_attn.weight
                m = W.shape[0]
                W_Q.append(W[:, :m])
                W_K.append(W[:, m : 2 * m])
            elif isinstance(q_proj, torch.nn.Linear) and isinstance(
                k_proj, torch.nn.Linear
            ):
                W_Q.append(q_proj.weight.T)  # Linear: x @ weight.T
                W_K.append(k_proj.weight.T)
        if not W_Q or any(q.shape != k.shape for q, k in zip(W_Q, W_K)):
            return None  # other layouts (grouped keys, fused kernels): no sv_W_A
        return _split_heads(W_Q, heads), _split_heads(W_K, heads)


def _split_heads(weights: Sequence[torch.Tensor], heads: int) -> np.ndarray:
    """[m, H k] per layer -> [layers, heads, m, k]."""
    out = []
    for w in weights:
        m, width = w.shape
        out.append(_numpy(w).reshape(m, heads, width // heads).transpose(1, 0, 2))
    return np.stack(out)


class MultiheadAttentionHooks(AbstractAttentionReader):
    """Hooks on every ``torch.nn.MultiheadAttention`` (module docstring)."""

    def fits(self, model):
        return any(isinstance(m, torch.nn.MultiheadAttention) for m in model.modules())

    def read(self, model, contexts):
        layers = [
            m for m in model.modules() if isinstance(m, torch.nn.MultiheadAttention)
        ]
        weights: dict[int, torch.Tensor] = {}

        def ask(module, args, kwargs):
            kwargs["need_weights"] = True
            kwargs["average_attn_weights"] = False
            return args, kwargs

        def keep(module, args, kwargs, output):
            weights[id(module)] = output[1]

        handles = []
        try:
            for m in layers:
                handles.append(m.register_forward_pre_hook(ask, with_kwargs=True))
                handles.append(m.register_forward_hook(keep, with_kwargs=True))
            output = model(contexts)
        finally:
            for h in handles:
                h.remove()
        missing = [i for i, m in enumerate(layers) if weights.get(id(m)) is None]
        if missing:
            raise ValueError(
                f"attention layers {missing} were not called through their forward "
                "(a fused fast path such as nn.TransformerEncoderLayer's in eval mode "
                "bypasses it); call the attention modules directly in the model"
            )
        if any(weights[id(m)].ndim != 4 for m in layers):
            raise ValueError(
                "expected batched per-head weights [b, h, s, s]; give the probe "
                "batch-first to batch_first=True layers"
            )
        return AttentionReading(
            attention=_stack([weights[id(m)] for m in layers]),
            logits=_numpy(_last_logits(output)),
            qk=self._projections(layers),
        )

    @staticmethod
    def _projections(layers) -> tuple[np.ndarray, np.ndarray] | None:
        if not all(m._qkv_same_embed_dim for m in layers):
            return None
        W_Q, W_K = [], []
        for m in layers:
            d = m.embed_dim
            W = m.in_proj_weight  # x @ W.T, rows [q; k; v]
            W_Q.append(W[:d].T)
            W_K.append(W[d : 2 * d].T)
        if len({m.num_heads for m in layers}) != 1:
            return None
        return _split_heads(W_Q, layers[0].num_heads), _split_heads(
            W_K, layers[0].num_heads
        )


class AutoAttention(AbstractAttentionReader):
    """The first reader that fits: Hugging Face, then MultiheadAttention hooks."""

    def __init__(self, readers: Sequence[AbstractAttentionReader] | None = None):
        self.readers = list(
            readers or (HuggingFaceAttention(), MultiheadAttentionHooks())
        )

    def fits(self, model):
        return any(r.fits(model) for r in self.readers)

    def read(self, model, contexts):
        for r in self.readers:
            if r.fits(model):
                return r.read(model, contexts)
        raise TypeError(
            f"no attention reader fits {type(model).__name__}: use a transformers "
            "model or torch.nn.MultiheadAttention layers, or pass a reader of your own"
        )


def _vocabulary(model: torch.nn.Module) -> int | None:
    """The vocabulary a probe's ids must lie in: the model's configuration, else
    its first embedding; None when neither says."""
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    if isinstance(size, int):
        return size
    for m in model.modules():
        if isinstance(m, torch.nn.Embedding):
            return m.num_embeddings
    return None


class TorchMonitor(Monitor):
    """A ``gflow.Monitor`` for PyTorch models (module docstring).

    Args:
        out, every: as ``Monitor``.
        reader: the attention reader (default ``AutoAttention()``).
        **kwargs: the other ``Monitor`` options (top, tracked, n_tracked, n_sv,
            detector, window, on_event, tensorboard, resume, verbose).
    """

    def __init__(
        self,
        out: str | os.PathLike,
        every: int = 10,
        *,
        reader: AbstractAttentionReader | None = None,
        **kwargs,
    ):
        super().__init__(out, every, **kwargs)
        self.reader = reader or AutoAttention()
        self._masks = None  # (probe, (shape, device, dtype), its ProbeMasks)

    def observe(
        self,
        step: int,
        model: torch.nn.Module,
        tokens: Int[ArrayLike, "b s1"] | torch.Tensor,
        t: float | None = None,
    ) -> list[Stage]:
        """Observe the torch ``model`` at ``step`` (when ``every`` divides it) on
        the probe ``tokens`` [b, s+1]; as ``Monitor.observe``."""
        if not self._due(step):
            return []
        if not isinstance(model, torch.nn.Module):
            raise TypeError(
                f"model must be a torch.nn.Module, got {type(model).__name__}"
            )
        if not self.reader.fits(model):
            raise TypeError(
                f"{type(self.reader).__name__} cannot read {type(model).__name__}: use "
                "a transformers model or torch.nn.MultiheadAttention layers, or pass "
                "a reader of your own"
            )
        host = (
            tokens.detach().cpu().numpy()
            if isinstance(tokens, torch.Tensor)
            else tokens
        )
        host = np.asarray(host)
        vocab = _vocabulary(model)  # known: the ids are checked before the pass
        probe = None if vocab is None else self.probe_for(host, vocab)
        reading = self._forward(model, host)
        if probe is None:
            probe = self.probe_for(host, reading.logits.shape[-1])
        reduced = None
        if isinstance(reading.attention, torch.Tensor):
            a = reading.attention
            key = (a.shape, a.device, a.dtype)
            # the probe by identity (probe_for keeps it while its tokens stay)
            if (
                self._masks is None
                or self._masks[0] is not probe
                or self._masks[1] != key
            ):
                self._masks = (probe, key, probe_masks(a, probe))
            reduced = torch_signals(a, probe, self._masks[2])
        signals = probe.read(reading, n_sv=self.n_sv, reduced=reduced)
        return self.record(step, signals, t, probe=probe)

    def _forward(self, model: torch.nn.Module, tokens: np.ndarray) -> AttentionReading:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        contexts = torch.tensor(tokens[:, :-1], dtype=torch.long, device=device)
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                return self.reader.read(model, contexts)
        finally:
            model.train(was_training)
