"""A vmapped sweep of K optimizer runs against K sequential runs (issue 5, item 3).

K = 16 SGD runs at 16 learning rates (traced in the ``inject_hyperparams`` state, so
both ways run one compiled program), on the population loss and on a full-batch
sequence loss (batch 128, s = 32). Compiled before timing; min of repeats; each row
carries the 1-minute load average at which it was taken. Writes results/sweep.json.

Each row also times the floor under the sweep: a bare gradient-descent loop
(``jax.grad`` and p − ηg in a ``lax.scan``, no optax, checks or records), vmapped
over the same 16 step sizes against 16 sequential loops. What ``run_core`` adds is
the difference between the two ratios.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from gflow import MarkovChain, SequenceLoss
from gflow.dynamics import StepClock, run_core

from .common import default_problem, load1, save, timed


def _states(optimizer, params, lrs):
    states = []
    for lr in lrs:
        s = optimizer.init(params)
        s.hyperparams["learning_rate"] = jnp.asarray(lr, jnp.float64)
        states.append(s)
    return states


def _bare_descent(loss, static, steps: int):
    """``(params, lr) -> params`` after ``steps`` plain gradient-descent steps."""

    def descend(params, lr):
        grad = jax.grad(lambda p: loss(eqx.combine(p, static)))

        def step(p, _):
            return jax.tree.map(lambda x, g: x - lr * g, p, grad(p)), None

        return jax.lax.scan(step, params, None, length=steps)[0]

    return descend


def run(*, k: int = 16, steps: int = 400, repeats: int = 2) -> dict:
    pop_loss, model = default_problem()
    tokens = MarkovChain.default().sample(key=jax.random.key(2), batch=128, length=33)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    optimizer = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
    states = _states(optimizer, params, np.geomspace(0.05, 0.5, k))
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
    lrs = jnp.asarray(np.geomspace(0.05, 0.5, k))  # the bare loops' step sizes
    stacked_params = jax.tree.map(lambda x: jnp.stack([x] * k), params)
    rows = {}
    for name, loss in [("population", pop_loss), ("sequence", SequenceLoss(tokens))]:

        def one(state, loss=loss):
            return run_core(
                params,
                static,
                state,
                loss,
                optimizer,
                StepClock(),
                None,
                steps=steps,
                save_every=50,
                save_params=False,
                blowup=1e8,
            )

        vmapped = eqx.filter_jit(eqx.filter_vmap(one))
        vmapped(stacked)
        one(states[0])
        load = load1()
        _, t_vmap = timed(lambda f=vmapped: f(stacked), repeats=repeats)
        _, t_seq = timed(lambda f=one: [f(s) for s in states], repeats=repeats)
        descend = _bare_descent(loss, static, steps)
        one_b, vmapped_b = jax.jit(descend), jax.jit(jax.vmap(descend))
        vmapped_b(stacked_params, lrs)
        one_b(params, lrs[0])
        _, b_vmap = timed(lambda f=vmapped_b: f(stacked_params, lrs), repeats=repeats)
        _, b_seq = timed(lambda f=one_b: [f(params, lr) for lr in lrs], repeats=repeats)
        rows[name] = {
            "vmap_s": t_vmap,
            "sequential_s": t_seq,
            "vmap_over_sequential": t_vmap / t_seq,
            "bare_vmap_s": b_vmap,
            "bare_sequential_s": b_seq,
            "bare_vmap_over_sequential": b_vmap / b_seq,
            "load_1min": load,
            "load_1min_after": load1(),
        }
        print(f"  {name}: {rows[name]}", flush=True)
    record = {"k": k, "steps": steps, "rows": rows}
    save("sweep", record)
    return record
