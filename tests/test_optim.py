import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gflow import run_optimizer

#: One SGD object and one (steps, save_every) for the runs below that can share
#: a compiled loop: the optimizer and the step counts are static, so each new
#: ``optax.inject_hyperparams(...)`` object compiled the loop again
SGD = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
STEPS = dict(steps=25, save_every=10)


def test_constant_clock_and_saves(setup):
    loss, model = setup
    tr = run_optimizer(loss, model, SGD, **STEPS)
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
    a = run_optimizer(loss, model, optax.sgd(0.1), learning_rate=0.1, **STEPS)
    b = run_optimizer(loss, model, SGD, **STEPS)
    np.testing.assert_allclose(a.t, b.t)
    np.testing.assert_allclose(a.final.W_E, b.final.W_E, rtol=1e-12)


def test_huge_step_is_diverged_with_its_step(setup):
    loss, model = setup
    # SGD's step size set to 1e9 in its state: the loop compiled above runs it
    state = SGD.init(eqx.filter(model, eqx.is_inexact_array))
    lr = state.hyperparams["learning_rate"]
    state.hyperparams["learning_rate"] = jnp.full_like(lr, 1e9)  # its dtype kept
    tr = run_optimizer(loss, model, SGD, opt_state=state, **STEPS)
    assert tr.status == "diverged"
    k = tr.stats["diverged_step"]
    assert 0 <= k < 25
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_the_clock_finds_a_learning_rate_nested_in_chains(setup):
    loss, model = setup
    inner = optax.inject_hyperparams(optax.sgd)(learning_rate=0.05)
    chained = optax.chain(optax.clip_by_global_norm(10.0), inner)
    outer = optax.inject_hyperparams(
        lambda decay: optax.chain(optax.trace(decay=decay), inner)
    )(decay=0.0)
    for opt in (chained, outer):
        tr = run_optimizer(loss, model, opt, steps=8, save_every=4)
        np.testing.assert_allclose(tr.t, [0.0, 0.2, 0.4], rtol=1e-7)


@pytest.mark.slow
def test_a_schedule_given_as_learning_rate_sets_the_clock(setup):
    """A plain optax optimizer with ``learning_rate=schedule``: t_k = Σ_{i<k} η_i."""
    loss, model = setup
    sched = optax.linear_schedule(0.1, 0.01, transition_steps=6)
    tr = run_optimizer(
        loss, model, optax.sgd(sched), steps=6, save_every=1, learning_rate=sched
    )
    expected = np.concatenate([[0.0], np.cumsum([float(sched(i)) for i in range(6)])])
    np.testing.assert_allclose(tr.t, expected, rtol=1e-6)
    ref = run_optimizer(
        loss,
        model,
        optax.inject_hyperparams(optax.sgd)(learning_rate=sched),
        steps=6,
        save_every=1,
    )
    np.testing.assert_allclose(tr.final.W_E, ref.final.W_E, rtol=1e-12)


@pytest.mark.slow
def test_blow_up_norm_marks_the_first_step_past_it(setup):
    """Divergence at the first step k whose new parameters have norm above blowup."""
    loss, model = setup
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=0.5)
    free = run_optimizer(loss, model, opt, steps=12, save_every=1, save_params=True)
    norms = np.array(
        [
            np.sqrt(
                sum(float(jnp.sum(x**2)) for x in jax.tree.leaves(free.snapshot(k)))
            )
            for k in range(13)
        ]
    )
    assert norms[12] > norms[1]  # the parameters grow
    blowup = 0.5 * (norms[1] + norms[12])
    k = int(np.argmax(norms[1:] > blowup))  # step k produced parameters k + 1
    tr = run_optimizer(loss, model, opt, steps=12, save_every=1, blowup=blowup)
    assert tr.status == "diverged" and tr.stats["diverged_step"] == k
    np.testing.assert_allclose(tr.final.W_E, free.snapshot(k).W_E, rtol=1e-12)
    assert run_optimizer(loss, model, opt, steps=12, blowup=norms.max() * 2).ok


@pytest.mark.slow
def test_a_given_optimizer_state_and_the_default_saves(setup):
    loss, model = setup
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
    params = eqx.filter(model, eqx.is_inexact_array)
    state = opt.init(params)
    state.hyperparams["learning_rate"] = jnp.asarray(0.2)
    tr = run_optimizer(loss, model, opt, steps=1000, opt_state=state)
    assert tr.stats["save_every"] == 5 and len(tr.t) == 201
    assert tr.t[-1] == pytest.approx(200.0, rel=1e-9)
    assert tr.stats["grad_evals"] == 1000 + 2 * 201
    assert tr.info == {"kind": "optimizer", "steps": 1000}
    assert tr.params is None  # snapshots only when asked for
    one = run_optimizer(loss, model, opt, steps=1)  # a single step is a run
    assert one.t[-1] == pytest.approx(0.1) and len(one.t) == 2
    assert tr.stats["steps"] == 1000 and "diverged_step" not in tr.stats


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"learning_rate": 0.0, "optimizer": optax.sgd(0.1)}, "learning_rate"),
        (
            {"optimizer": optax.inject_hyperparams(optax.sgd)(learning_rate=-0.1)},
            "learning_rate must be positive",
        ),
        ({"steps": 2.5}, "steps"),
        ({"steps": 5, "save_every": 1.5}, "save_every"),
    ],
)
def test_bad_learning_rates_and_counts(setup, kwargs, match, unchecked):
    loss, model = setup
    kwargs = {
        "optimizer": optax.inject_hyperparams(optax.sgd)(learning_rate=0.1),
        "steps": 5,
        **kwargs,
    }
    with pytest.raises(ValueError, match=match):
        run_optimizer(loss, model, kwargs.pop("optimizer"), **kwargs)


def test_a_non_finite_gradient_in_one_block_is_a_divergence(setup):
    """The loss stays finite while W_E's gradient is NaN (the gradient of a where
    over a NaN branch): the run diverges at step 0 and keeps the initial model."""
    loss, model = setup

    def nan_grad_in_W_E(m):
        x = jnp.sum(m.W_E**2)
        return loss(m) + jnp.where(x < 0, jnp.sqrt(-x), 0.0)

    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
    tr = run_optimizer(nan_grad_in_W_E, model, opt, steps=3, save_every=1)
    assert tr.status == "diverged" and tr.stats["diverged_step"] == 0
    np.testing.assert_array_equal(tr.final.W_E, model.W_E)
    assert tr.stats["diverged_time"] == 0.0
