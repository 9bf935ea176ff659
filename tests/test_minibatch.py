"""Minibatch optimizer runs (gflow.dynamics.minibatch): a fixed stream is full-batch
GD, pieces resume bit for bit, the clock sums a schedule, divergence freezes."""

import jax
import numpy as np
import optax
import pytest

from gflow import AttentionModel, MarkovChain, SequenceLoss, run_optimizer
from gflow.dynamics import minibatch_segment, run_minibatch, step_keys
from gflow.problems import sequence_loss

CHAIN = MarkovChain.from_lambda(pi=(0.6, 0.3, 0.1), lam=0.5)
FIXED = CHAIN.sample(key=jax.random.key(5), batch=16, length=6)


def fixed_stream(key):
    del key
    return FIXED


def fresh_stream(key):
    return CHAIN.sample(key=key, batch=16, length=6)


@pytest.fixture(scope="module")
def model():
    return AttentionModel.init(
        d_vocab=3, d_model=3, init_scale=0.5, key=jax.random.key(2)
    )


@pytest.mark.slow
def test_a_fixed_stream_is_full_batch_gd(model):
    loss = SequenceLoss(FIXED)
    mini = run_minibatch(
        loss,
        model,
        optax.sgd(0.2),
        fixed_stream,
        batch_loss=sequence_loss,
        steps=12,
        learning_rate=0.2,
        key=jax.random.key(0),
        save_every=3,
    )
    full = run_optimizer(
        loss, model, optax.sgd(0.2), steps=12, save_every=3, learning_rate=0.2
    )
    np.testing.assert_allclose(mini.t, full.t, rtol=1e-12)
    np.testing.assert_allclose(mini.metrics["loss"], full.metrics["loss"], rtol=1e-12)
    np.testing.assert_allclose(mini.final.W_E, full.final.W_E, rtol=1e-12)


@pytest.mark.slow
def test_pieces_resume_bit_for_bit_and_batches_are_fresh(model):
    kw = dict(
        batch_loss=sequence_loss,
        key=jax.random.key(1),
        save_every=2,
        learning_rate=0.1,
        save_params=True,
    )
    loss, opt = SequenceLoss(FIXED), optax.adam(0.1)
    whole, state = minibatch_segment(loss, model, opt, fresh_stream, steps=8, **kw)
    a, sa = minibatch_segment(loss, model, opt, fresh_stream, steps=4, **kw)
    b, sb = minibatch_segment(
        loss,
        a.final,
        opt,
        fresh_stream,
        steps=4,
        start=4,
        t0=a.t[-1],
        opt_state=sa,
        **kw,
    )
    np.testing.assert_array_equal(whole.final.W_E, b.final.W_E)
    np.testing.assert_array_equal(
        np.concatenate([a.metrics["loss"], b.metrics["loss"][1:]]),
        whole.metrics["loss"],
    )
    np.testing.assert_allclose(np.concatenate([a.t, b.t[1:]]), whole.t, rtol=1e-12)
    for x, y in zip(jax.tree.leaves(state), jax.tree.leaves(sb)):
        np.testing.assert_array_equal(x, y)
    # fresh batches: different keys draw different batches, unlike the fixed stream
    k = step_keys(jax.random.key(1), 0, 2)
    assert not np.array_equal(fresh_stream(k[0]), fresh_stream(k[1]))
    fixed, _ = minibatch_segment(loss, model, opt, fixed_stream, steps=8, **kw)
    assert not np.allclose(fixed.final.W_E, whole.final.W_E)


@pytest.mark.slow
def test_the_clock_sums_a_schedule(model):
    schedule = optax.warmup_cosine_decay_schedule(0.0, 0.2, 3, 10)
    traj = run_minibatch(
        SequenceLoss(FIXED),
        model,
        optax.sgd(schedule),
        fresh_stream,
        batch_loss=sequence_loss,
        steps=10,
        learning_rate=schedule,
        key=jax.random.key(0),
        save_every=5,
    )
    eta = np.array([schedule(k) for k in range(10)])
    np.testing.assert_allclose(traj.t, [0.0, eta[:5].sum(), eta.sum()], rtol=1e-6)


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_divergence_freezes_the_run(model):
    traj = run_minibatch(
        SequenceLoss(FIXED),
        model,
        optax.sgd(1e12),
        fresh_stream,
        batch_loss=sequence_loss,
        steps=6,
        learning_rate=1e12,
        key=jax.random.key(0),
        save_every=2,
    )
    assert traj.status == "diverged"
    k = traj.stats["diverged_step"]
    assert k < 6 and np.isnan(traj.metrics["loss"][-1])
    assert np.isfinite(traj.metrics["loss"][0])
    with pytest.raises(ValueError, match="multiple of save_every"):
        minibatch_segment(
            SequenceLoss(FIXED),
            model,
            optax.sgd(0.1),
            fresh_stream,
            batch_loss=sequence_loss,
            key=jax.random.key(0),
            steps=5,
            save_every=2,
            learning_rate=0.1,
        )


def test_a_fresh_stream_run_is_the_hand_loop_on_its_keys(model):
    """The default suite's oracle of the minibatch loop (issue 33 point 7): four SGD
    steps on fresh batches, each drawn with the run's own key for its step
    (``step_keys``), recomputed by a plain Python loop; the clock is Σ η."""
    import equinox as eqx

    key, lr = jax.random.key(3), 0.3
    run = run_minibatch(
        SequenceLoss(FIXED),
        model,
        optax.sgd(lr),
        fresh_stream,
        batch_loss=sequence_loss,
        steps=4,
        learning_rate=lr,
        key=key,
        save_every=1,  # a save at every step is allowed
        save_params=True,
    )
    params, static = eqx.partition(model, eqx.is_inexact_array)
    grad = jax.jit(jax.grad(lambda p, b: sequence_loss(eqx.combine(p, static), b)))
    held = jax.jit(lambda p: SequenceLoss(FIXED)(eqx.combine(p, static)))
    losses, w_e = [float(held(params))], [params.W_E]
    for step_key in step_keys(key, 0, 4):
        g = grad(params, fresh_stream(step_key))
        params = jax.tree.map(lambda x, d: x - lr * d, params, g)
        losses.append(float(held(params)))
        w_e.append(params.W_E)
    np.testing.assert_allclose(run.t, lr * np.arange(5.0), rtol=1e-12)
    np.testing.assert_allclose(run.metrics["loss"], losses, rtol=1e-10)
    np.testing.assert_allclose(run.final.W_E, params.W_E, rtol=1e-10, atol=1e-14)
    # the kept snapshots are the hand loop's parameters at every save
    np.testing.assert_allclose(run.params.W_E, np.stack(w_e), rtol=1e-10, atol=1e-14)
    assert run.info["kind"] == "minibatch"
