"""Step-size schedules as closed forms of the step k, traceable in every argument.

One warmup-cosine serves every run that has one (``gflow text``'s in-program
loop and ``gflow train``'s optax transformation through the name table
``gflow.runs.names.SCHEDULES``), so that a schedule means the same numbers
wherever it is used.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np


def warmup_cosine(k, peak, warmup, total, final=0.0, xp=jnp):
    """η_k of the warmup-cosine schedule, in closed form (``xp``: jnp or numpy).

    η_k = peak·k/w for k < w, then final + (peak − final)·(1 + cos(π·min(k − w,
    T − w)/(T − w)))/2, with w = ``warmup`` steps and T = ``total`` steps: the values
    of ``optax.warmup_cosine_decay_schedule(0, peak, w, T, final)`` (which
    ``tests/test_text_optimizers.py`` checks), written with plain operations so that
    every argument may be traced. w = 0: no warmup (η_0 = peak).
    """
    k = xp.asarray(k)
    dtype = xp.result_type(peak, xp.float32)
    k = k.astype(dtype)
    warm = peak * k / xp.maximum(warmup, 1)
    span = xp.maximum(total - warmup, 1)
    frac = xp.clip((k - warmup) / span, 0, 1)
    cos = final + (peak - final) * 0.5 * (1 + xp.cos(np.pi * frac))
    return xp.where(k < warmup, warm, cos)


class AbstractSchedule(eqx.Module):
    """A step-size schedule k -> η_k as an object: what a configuration's
    ``schedule`` name becomes (``gflow.runs.names.SCHEDULES``), so that the loops
    receive the schedule and never read its name.

    Every schedule is a warmup-cosine in its four numbers (``peak``, ``warmup``,
    ``total``, ``final``): a constant step is the one with no warmup and
    ``final`` = ``peak``, whose η_k is exactly ``peak``. A loop that traces those
    four numbers therefore runs every schedule in one compiled program.
    """

    name: eqx.AbstractClassVar[str]
    peak: float
    warmup: int
    total: int
    final: float

    def __call__(self, k, xp=jnp):
        """η_k (``k`` may be traced; ``xp``: jnp or numpy)."""
        return warmup_cosine(k, self.peak, self.warmup, self.total, self.final, xp=xp)

    @abc.abstractmethod
    def rate(self, dtype=None) -> float | Callable:
        """What an optax transformation takes as its learning rate: the number
        itself for a constant step, else the schedule k -> η_k (its numbers as
        ``dtype`` arrays, or the Python floats, weakly typed, for None)."""

    @abc.abstractmethod
    def clock(self, k: np.ndarray) -> np.ndarray:
        """The flow clock t_k = Σ_{j<k} η_j at the steps ``k`` (float64)."""


class Constant(AbstractSchedule):
    """η_k = ``peak`` at every step."""

    name: ClassVar[str] = "constant"

    def __init__(self, peak: float, total: int = 1):
        self.peak = peak
        self.warmup = 0
        self.total = total
        self.final = peak

    def rate(self, dtype=None) -> float:
        return self.peak

    def clock(self, k: np.ndarray) -> np.ndarray:
        return np.asarray(k) * float(self.peak)  # k·η exactly, not a rounded sum


class WarmupCosine(AbstractSchedule):
    """Linear warmup from 0 to ``peak`` over ``warmup`` steps, then a cosine down
    to ``final`` at step ``total`` (``warmup_cosine``)."""

    name: ClassVar[str] = "warmup-cosine"

    def __init__(self, peak: float, warmup: int, total: int, final: float = 0.0):
        self.peak = peak
        self.warmup = warmup
        self.total = total
        self.final = final

    def __check_init__(self):
        if not 0 <= self.warmup <= self.total:
            raise ValueError(
                f"warmup must lie in [0, total = {self.total}], got {self.warmup}"
            )

    def rate(self, dtype=None) -> Callable:
        def number(x):
            return x if dtype is None else np.asarray(x, dtype)

        return functools.partial(
            warmup_cosine,
            peak=number(self.peak),
            warmup=self.warmup,
            total=self.total,
            final=number(self.final),
        )

    def clock(self, k: np.ndarray) -> np.ndarray:
        # float64 arguments: a Python float would take float32's (weak) type
        peak, end = np.float64(self.peak), np.float64(self.final)
        steps = np.arange(self.total)
        eta = warmup_cosine(steps, peak, self.warmup, self.total, end, xp=np)
        return np.concatenate([[0.0], np.cumsum(eta)])[np.asarray(k)]
