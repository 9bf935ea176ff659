"""Step-size schedules as closed forms of the step k, traceable in every argument.

One warmup-cosine serves every run that has one (``gflow text``'s in-program
loop and ``gflow train``'s optax transformation through the name table
``gflow.runs.names.SCHEDULES``), so that a schedule means the same numbers
wherever it is used.
"""

from __future__ import annotations

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
