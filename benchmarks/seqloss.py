"""Sequence-loss gradient: the d×d form against the gathered-embedding form.

Same tokens (batch 256, s = 64, sampled from the default chain), same model (d = 4,
m = 32), both last-position and all-positions objectives; jitted, compiled before
timing, min of repeats. Writes results/seqloss.json.
"""

from __future__ import annotations

import equinox as eqx
import jax

from gflow import MarkovChain, SequenceLoss

from .common import default_problem, load1, save, timed


def run(*, batch: int = 256, length: int = 64, repeats: int = 20) -> dict:
    _, model = default_problem()
    tokens = MarkovChain.default().sample(
        key=jax.random.key(1), batch=batch, length=length + 1
    )
    rows = {}
    for all_pos in (False, True):
        times = {}
        load = load1()
        for dense in (True, False):
            loss = SequenceLoss(tokens, all_positions=all_pos, dense=dense)
            g = eqx.filter_jit(eqx.filter_grad(lambda m, loss=loss: loss(m)))
            g(model)
            _, times[dense] = timed(lambda g=g: g(model), repeats=repeats)
        key = "all_positions" if all_pos else "last_position"
        rows[key] = {
            "dense_ms": 1e3 * times[True],
            "gathered_ms": 1e3 * times[False],
            "gathered_over_dense": times[False] / times[True],
            "load_1min": load,
        }
        print(f"  {key}: {rows[key]}", flush=True)
    record = {"batch": batch, "length": length, "rows": rows}
    save("seqloss", record)
    return record
