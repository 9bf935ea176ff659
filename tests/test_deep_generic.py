"""The dynamics are generic: a 2-layer, 2-head Transformer with every option on runs
through run_optimizer, run_sweep, compare_sweep and the references, on a fixed
Markov sample (full batch) as on fresh minibatches."""

import jax
import numpy as np
import optax
import pytest

import gflow
from gflow import (
    FlowReference,
    MarkovChain,
    MarkovStream,
    ModifiedFlowReference,
    SequenceLoss,
    Transformer,
    compare_sweep,
    run_minibatch,
    run_optimizer,
    run_sweep,
    sequence_loss,
    solve_flow,
)

pytestmark = pytest.mark.slow  # ~1.5 min on 2 cores: run by CI's slow step

CHAIN = MarkovChain.from_lambda(pi=(0.6, 0.25, 0.15), lam=0.5)


@pytest.fixture(scope="module")
def deep():
    model = Transformer.init(
        d_vocab=3,
        d_model=4,
        n_layers=2,
        n_heads=2,
        key=jax.random.key(0),
        init_scale=0.3,
        d_ff=4,
        value=True,
        layernorm=True,
        residual=True,
        max_len=6,
    )
    tokens = CHAIN.sample(key=jax.random.key(1), batch=16, length=6)
    return model, SequenceLoss(tokens)


def test_gd_approaches_the_flow_at_first_order(deep):
    """GD on the fixed sample is the flow's Euler method: the distance at t = 0.4
    halves with η (order 1), so the generic flow and optimizer agree."""
    model, loss = deep
    dist = []
    for lr in (0.04, 0.02):
        gd = run_optimizer(
            loss,
            model,
            optax.sgd(lr),
            steps=round(0.4 / lr),
            learning_rate=lr,
            save_every=round(0.4 / lr),
            save_params=True,
        )
        ref = solve_flow(
            loss, model, t1=gd.t[-1], ts=gd.t, save_params=True, rtol=1e-10, atol=1e-12
        )
        dist.append(gflow.parameter_distance(ref, gd)["total"][-1])
    assert dist[0] > 0 and dist[0] / dist[1] == pytest.approx(2.0, rel=0.1)


def test_a_sweep_of_a_deep_model_against_both_references(deep):
    model, loss = deep
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
    run = run_sweep(loss, model, opt, [0.04, 0.02], t1=0.4, num_saves=3)
    assert [run.status(m) for m in range(2)] == ["success", "success"]
    flow = compare_sweep(run, FlowReference(), loss, model)
    assert flow["order"] == pytest.approx(1.0, abs=0.15)
    modified = compare_sweep(run, ModifiedFlowReference(), loss, model)
    assert modified["order"] == pytest.approx(2.0, abs=0.3)
    errs = [m["error"] for m in modified["members"]]
    assert all(e < f["error"] for e, f in zip(errs, flow["members"]))


def test_fresh_minibatches_of_the_chain_move_away_from_the_full_batch_run(deep):
    model, loss = deep
    kw = dict(steps=20, learning_rate=0.05, key=jax.random.key(2), save_every=5)
    stream = MarkovStream(CHAIN, batch=16, length=6)
    sgd = run_minibatch(
        loss, model, optax.sgd(0.05), stream, batch_loss=sequence_loss, **kw
    )
    full = run_optimizer(
        loss, model, optax.sgd(0.05), steps=20, save_every=5, learning_rate=0.05
    )
    np.testing.assert_allclose(sgd.t, full.t, rtol=1e-12)
    assert sgd.status == "success" and sgd.metrics["loss"][-1] < sgd.metrics["loss"][0]
    assert not np.allclose(sgd.final.W_E, full.final.W_E)
