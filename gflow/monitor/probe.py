"""The probe batch of a monitor fed by another framework, and the signals of one
observation computed from what that framework gives back.

A ``Probe`` is the fixed batch ``tokens`` [b, s+1] (contexts ``tokens[:, :-1]``,
targets ``tokens[:, -1]``) with the tokens its signals follow: ``top`` and
``tracked``, chosen from the contexts' counts as ``HeadObservables.default`` chooses
them for the JAX path. ``Probe.signals`` turns one forward pass of any framework,

- the attention probabilities [layers, heads, batch, query, key],
- the last position's logits [batch, vocabulary],
- optionally the query and key projections of each head, [layers, heads, m, k]
  each (W_Q,h and W_K,h with q = x W_Q,h), for the singular values σ_i of
  W_A,h = W_Q,h W_K,hᵀ that asymmetry lifting reads,

into the mapping ``Monitor.record`` takes: the per-head signals of
``gflow.attention_signals``, the probe ``loss`` (mean cross-entropy of the targets),
``unigram_gap`` and ``top_dominance`` (the stage rules' information and
frequent-token conditions, as ``gflow.monitor.signals`` computes them on the JAX
path) and ``sv_W_A`` [l, h, n_sv]. The PyTorch, Hugging Face and Flax adapters
(``gflow.monitor.pytorch``, ``gflow.monitor.huggingface``, ``gflow.monitor.flax_nnx``)
are this plus reading those three things out of their models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from jaxtyping import ArrayLike, Float, Int

from gflow.analysis.head_observables import HeadObservables
from gflow.analysis.key_classes import top_dominance
from gflow.monitor.reduce import AttentionSignals, attention_signals
from gflow.problems.transformer import product_singular_values

__all__ = ["AttentionReading", "Probe"]


@dataclass(frozen=True)
class AttentionReading:
    """What one probe forward pass of a framework gives the monitor (NumPy)."""

    # [layers, heads, batch, query, key]; an adapter that reduces the attention on
    # its own device (the PyTorch one) may hold its tensor here instead
    attention: Any
    logits: np.ndarray  # [batch, vocabulary], the last position's
    qk: tuple[np.ndarray, np.ndarray] | None  # W_Q, W_K [layers, heads, m, k]


@dataclass(frozen=True)
class Probe:
    """A fixed probe batch and the tokens its signals follow (module docstring)."""

    tokens: Int[ArrayLike, "b s1"]  # held as a NumPy int array [b, s+1]
    top: int
    tracked: Int[ArrayLike, " q"] | Sequence[int]  # held as NumPy int [q]

    def __post_init__(self):
        toks = np.asarray(self.tokens)
        if toks.ndim != 2 or toks.shape[1] < 2:
            raise ValueError(f"probe tokens must be int [batch, s+1], got {toks.shape}")
        if not np.issubdtype(toks.dtype, np.integer):
            raise TypeError(f"probe tokens must be integers, got {toks.dtype}")
        object.__setattr__(self, "tokens", toks)
        object.__setattr__(self, "top", int(self.top))
        tracked = np.asarray(self.tracked, dtype=toks.dtype).reshape(-1)
        object.__setattr__(self, "tracked", tracked)

    @classmethod
    def default(
        cls,
        tokens: Int[ArrayLike, "b s1"],
        d_vocab: int,
        *,
        n_tracked: int = 3,
        top: int | None = None,
        tracked: Sequence[int] | Int[ArrayLike, " q"] | None = None,
    ) -> Probe:
        """Top and tracked from the contexts' counts (``HeadObservables.default``:
        top the most frequent token, tracked the ``n_tracked`` least frequent that
        occur), unless given; every token id must lie in 0 .. d_vocab−1."""
        toks = np.asarray(tokens)
        if toks.size and (toks.min() < 0 or toks.max() >= d_vocab):
            bad = toks[(toks < 0) | (toks >= d_vocab)].ravel()[0]
            raise ValueError(f"probe token {int(bad)} is outside [0, {d_vocab})")
        chosen = HeadObservables.default(toks, d_vocab, n_tracked=n_tracked)
        top = int(chosen.top) if top is None else int(top)
        tracked = np.asarray(chosen.tracked) if tracked is None else tracked
        for tok in [top, *np.ravel(np.asarray(tracked)).tolist()]:
            if not 0 <= tok < d_vocab:
                raise ValueError(f"top and tracked tokens must lie in [0, {d_vocab})")
        return cls(toks, top, np.asarray(tracked))

    @property
    def contexts(self) -> np.ndarray:
        """The contexts ``tokens[:, :-1]`` the model reads, int [b, s]."""
        return self.tokens[:, :-1]

    @property
    def targets(self) -> np.ndarray:
        """The next tokens ``tokens[:, -1]`` the probe loss scores, int [b]."""
        return self.tokens[:, -1]

    def config(self) -> dict:
        """What a monitor records of its probe in its configuration."""
        return {
            "probe_shape": list(self.tokens.shape),
            "top": self.top,
            "tracked": self.tracked.tolist(),
        }

    def read(
        self,
        reading: AttentionReading,
        *,
        n_sv: int = 4,
        reduced: AttentionSignals | None = None,
    ) -> dict[str, np.ndarray]:
        """``signals`` of one ``AttentionReading`` (``reduced``: its attention
        already reduced by the adapter, which then is not read again)."""
        attention = reading.attention if reduced is None else reduced
        return self.signals(attention, reading.logits, qk=reading.qk, n_sv=n_sv)

    def signals(
        self,
        attention: Float[ArrayLike, "l h b r s"] | AttentionSignals,
        logits: Float[ArrayLike, "b d"],
        *,
        qk: tuple[Float[ArrayLike, "l h m k"], Float[ArrayLike, "l h m k"]]
        | None = None,
        n_sv: int = 4,
    ) -> dict[str, np.ndarray]:
        """The signals of one observation (module docstring), for
        ``Monitor.record``; ``attention`` may be given already reduced (the
        ``AttentionSignals`` of this probe)."""
        if not isinstance(attention, AttentionSignals):
            attention = attention_signals(
                attention, self.tokens, top=self.top, tracked=self.tracked
            )
        out = attention.as_dict()
        logits = np.asarray(logits, dtype=float)
        b = self.tokens.shape[0]
        if logits.ndim != 2 or logits.shape[0] != b:
            raise ValueError(f"logits must be [{b}, vocabulary], got {logits.shape}")
        shifted = logits - logits.max(axis=-1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        out["loss"] = np.asarray(-logp[np.arange(b), self.targets].mean())
        # the stage rules' two conditions, as the JAX monitor records them: the
        # probe loss against the probe's add-one smoothed context unigram, and
        # how dominant its top token is
        counts = np.bincount(self.contexts.ravel(), minlength=logits.shape[-1]) + 1.0
        unigram = -np.mean(np.log(counts / counts.sum())[self.targets])
        out["unigram_gap"] = np.asarray(out["loss"] - unigram)
        out["top_dominance"] = np.asarray(
            min(top_dominance(self.contexts, self.top), 1e30), dtype=float
        )
        if qk is not None:
            W_Q, W_K = (np.asarray(w, dtype=float) for w in qk)
            if W_Q.shape != W_K.shape or W_Q.ndim != 4:
                raise ValueError(
                    f"qk must be two [layers, heads, m, k] arrays, got {W_Q.shape} "
                    f"and {W_K.shape}"
                )
            sv = product_singular_values(W_Q, W_K, xp=np)
            out["sv_W_A"] = sv[..., :n_sv]
        return out
