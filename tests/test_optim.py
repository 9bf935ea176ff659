import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gflow import run_optimizer


def test_constant_clock_and_saves(setup):
    loss, model = setup
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
    tr = run_optimizer(loss, model, opt, steps=25, save_every=10)
    # saves at steps 0, 10, 20 and the last step 25
    np.testing.assert_allclose(tr.t, [0.0, 1.0, 2.0, 2.5], rtol=1e-12)
    assert tr.metrics["loss"][0] == pytest.approx(float(loss(model)))
    assert tr.metrics["loss"][-1] == pytest.approx(float(loss(tr.final)))
    assert tr.metrics["loss"][-1] < tr.metrics["loss"][0]
    assert tr.status == "success"


def test_schedule_sets_the_clock(setup):
    loss, model = setup
    sched = optax.linear_schedule(0.2, 0.02, transition_steps=10)
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=sched)
    tr = run_optimizer(loss, model, opt, steps=12, save_every=1)
    expected = np.concatenate([[0.0], np.cumsum([float(sched(i)) for i in range(12)])])
    # optax evaluates the schedule in float32: the clock uses the value it stepped with
    np.testing.assert_allclose(tr.t, expected, rtol=1e-6)


def test_plain_optimizer_needs_learning_rate(setup):
    loss, model = setup
    with pytest.raises(ValueError, match="inject_hyperparams"):
        run_optimizer(loss, model, optax.sgd(0.1), steps=3)
    a = run_optimizer(
        loss, model, optax.sgd(0.1), steps=5, learning_rate=0.1, save_every=5
    )
    b = run_optimizer(
        loss,
        model,
        optax.inject_hyperparams(optax.sgd)(learning_rate=0.1),
        steps=5,
        save_every=5,
    )
    np.testing.assert_allclose(a.t, b.t)
    np.testing.assert_allclose(a.final.W_E, b.final.W_E, rtol=1e-12)


def test_huge_step_is_diverged_with_its_step(setup):
    loss, model = setup
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=1e9)
    tr = run_optimizer(loss, model, opt, steps=20, save_every=1)
    assert tr.status == "diverged"
    k = tr.stats["diverged_step"]
    assert 0 <= k < 20
    assert np.all(np.isfinite(np.asarray(tr.final.W_E)))
    assert np.isnan(tr.metrics["loss"][-1])


def test_adam_runs_on_the_clock(setup):
    loss, model = setup
    opt = optax.inject_hyperparams(optax.adam)(learning_rate=0.01)
    tr = run_optimizer(loss, model, opt, steps=100)
    assert tr.t[-1] == pytest.approx(1.0)
    assert tr.metrics["loss"][-1] < tr.metrics["loss"][0]


@pytest.mark.parametrize("kwargs", [{"steps": 0}, {"steps": 5, "save_every": 0}])
def test_bad_step_counts(setup, kwargs):
    loss, model = setup
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
    with pytest.raises(ValueError, match="steps|save_every"):
        run_optimizer(loss, model, opt, **kwargs)


def test_observables_are_recorded(setup):
    loss, model = setup
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
    obs = {"wq_norm": lambda m: jnp.linalg.norm(m.W_Q)}
    tr = run_optimizer(
        loss, model, opt, steps=4, save_every=2, observables=obs, save_params=True
    )
    np.testing.assert_allclose(
        tr.metrics["wq_norm"], [np.linalg.norm(tr.snapshot(i).W_Q) for i in range(3)]
    )


def test_clock_under_a_schedule_stops_at_the_divergence(setup):
    """t_k = Σ_{i<k} η_i with a schedule, frozen at the step that diverged.

    η_i = 0.1 for i < 5, then 1e13: step 5 throws the parameters past the blow-up
    norm, so the run diverges at k = 5, at t = 5 · 0.1 exactly, and every later
    save repeats that time with a NaN loss.
    """
    loss, model = setup
    sched = optax.piecewise_constant_schedule(0.1, {5: 1e14})
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=sched)
    tr = run_optimizer(loss, model, opt, steps=9, save_every=1)
    assert tr.status == "diverged"
    assert tr.stats["diverged_step"] == 5
    # (η may carry float32 round-off from the schedule: rtol 1e-7)
    assert tr.stats["diverged_time"] == pytest.approx(0.5, rel=1e-7)
    np.testing.assert_allclose(tr.t[:6], np.arange(6) * 0.1, rtol=1e-7)
    np.testing.assert_array_equal(tr.t[5:], tr.t[5])
    # saves are of the state after k steps: finite up to k = 5, NaN after
    assert np.all(np.isfinite(tr.metrics["loss"][:6]))
    assert np.all(np.isnan(tr.metrics["loss"][6:]))
    # the model stops at its last good state: five plain SGD steps of 0.1
    ref = run_optimizer(
        loss, model, optax.inject_hyperparams(optax.sgd)(learning_rate=0.1), steps=5
    )
    np.testing.assert_allclose(tr.final.W_E, ref.final.W_E, rtol=1e-6)
