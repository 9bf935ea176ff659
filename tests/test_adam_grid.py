"""experiments/adam_grid.py (issue 34 point 3): its in-program Adam/AdamW equals
optax.adamw with the same schedule, its saved preconditioned sharpness is the dense
λ_max(D H) at that save, every run reaches its clock, and the cell summaries read
the runs they are given."""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from experiments import adam_grid as ag
from gflow import MarkovObservables, PopulationLoss
from gflow.analysis import adam_scale, dense_hessian
from gflow.runs import FlowConfig

CFG = dataclasses.replace(
    ag.QUICK, d_model=4, t1=0.6, num_saves=4, lanczos_iters=64, peaks=(0.05,)
)


@pytest.fixture(scope="module")
def program():
    """One AdamW run (50% warmup, cosine) through the experiment's program."""
    run = next(
        r
        for r in ag.members(CFG, 0.05)
        if r["weight_decay"] and r["schedule"] == "cosine" and r["warmup"] == 0.5
    )
    stride, saves = ag.save_grid(CFG, [run])
    flow_cfg = FlowConfig(d_model=CFG.d_model, init_scale=0.3, seed=1)
    chain = flow_cfg.chain()
    loss = PopulationLoss(chain)
    params, static = eqx.partition(flow_cfg.model(), eqx.is_inexact_array)
    runner = ag.make_runner(CFG, loss, MarkovObservables(chain), static, stride, saves)
    batch = jax.tree.map(lambda x: x[None], params)
    args = [jnp.asarray([run[k]]) for k in ("peak", "warmup_steps", "steps")]
    args += [jnp.asarray([run["final"]]), jnp.asarray([run["weight_decay"]])]
    records, rise, p_end, _ = runner(
        batch, jax.random.split(jax.random.key(0), 1), *args
    )
    records, p_end = jax.tree.map(np.asarray, (records, p_end))
    return run, stride, saves, loss, params, static, records, rise, p_end


def test_the_programs_adamw_is_optax_adamw_with_the_schedule(program):
    run, stride, saves, loss, params, static, records, _, p_end = program

    def schedule(k):  # a float64 peak: a Python float would round η_k to float32
        peak = jnp.float64(run["peak"])
        return ag.step_size(k, peak, run["warmup_steps"], run["steps"], run["final"])

    opt = optax.adamw(
        schedule, b1=CFG.b1, b2=CFG.b2, eps=CFG.eps, weight_decay=run["weight_decay"]
    )
    grad = jax.jit(jax.grad(lambda p: loss(eqx.combine(p, static))))
    state = opt.init(params)
    update = jax.jit(opt.update)
    p = params
    for k in range(stride * saves):
        if k == stride:  # the second save: the dense sharpness there
            adam_state = state[0]
            D = np.asarray(adam_scale(adam_state.nu, adam_state.count, b2=CFG.b2))
            H = np.asarray(dense_hessian(loss, eqx.combine(p, static)))
            dense = np.linalg.eigvals(D[:, None] * H).real.max()
            assert float(records["sharpness"][0, 1]) == pytest.approx(dense, rel=1e-6)
        u, state = update(grad(p), state, p)
        p = optax.apply_updates(p, u)
    for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(p_end)):
        np.testing.assert_allclose(np.asarray(b)[0], a, rtol=1e-10, atol=1e-14)
    # the first save is before any step: no Adam state, no sharpness
    assert np.isnan(records["sharpness"][0, 0])
    assert records["step"][0].tolist() == [j * stride for j in range(saves)]


def test_the_saved_clock_is_the_sum_of_the_steps_and_reaches_t1(program):
    run, stride, _, _, _, _, records, _, _ = program
    k = np.arange(stride * len(records["t"][0]))
    lrs = ag.step_size(
        k, run["peak"], run["warmup_steps"], run["steps"], run["final"], xp=np
    )
    steps = records["step"][0]
    np.testing.assert_allclose(records["t"][0], [lrs[:s].sum() for s in steps])
    assert lrs[run["steps"] :].max() == 0  # the run stops at its own N
    members = ag.members(ag.Config(), 0.01)
    # one length for every member (η_k = 0 from a run's last step on): the step
    # sizes' operations compile once, not once per run length
    k = np.arange(max(r["steps"] for r in members))
    for r in members:
        total = float(
            np.sum(
                ag.step_size(k, r["peak"], r["warmup_steps"], r["steps"], r["final"])
            )
        )
        assert total == pytest.approx(ag.Config().t1, rel=0.01), r


def _fake(seed, holds, collapse, peak=0.01, wd=0.0):
    stages = {s: (1.0 if holds else None) for s in ag.STAGES}
    stages |= {"collapse": collapse, "min_entropy": 0.3 if holds else 1e-9}
    return {
        "peak": peak,
        "warmup": 0.0,
        "schedule": "constant",
        "init": 0.02,
        "weight_decay": wd,
        "seed": seed,
        "stages": stages,
        "holds": holds,
        "final_loss": 0.7,
        "final_keys": [0, 0, 1, 2],
        "predicted_departure": None if holds else 2.0,
        "first_rise": 3.0,
        "max_edge_ratio": 0.5 if holds else 2.0,
    }


def test_the_region_is_the_cells_that_hold_in_every_seed():
    runs = [_fake(s, True, None) for s in range(3)]
    runs += [_fake(s, s != 1, None if s != 1 else 4.0, peak=0.1) for s in range(3)]
    runs += [_fake(s, False, 1.0, wd=0.1) for s in range(3)]
    assert ag.region(runs) == ["Adam, ε = 0.02, constant, warmup 0%, η = 0.01"]
    rows = {r[3] + r[0]: r for r in ag.cell_rows(runs)}
    assert rows["0.01Adam"][4] == "3/3" and rows["0.1Adam"][4] == "2/3"
    assert rows["0.01AdamW"][6] == "3/3 at 1"
    assert rows["0.01Adam"][8] == "0012 (3/3)"
    dep = ag.departure_summary(runs)
    assert dep["collapsed"] == 4 and dep["crossed_edge"] == 4
    assert dep["rise_after_prediction"] == 4 and dep["collapse_after_prediction"] == 1
