import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gflow
from gflow import AttentionModel, solve_flow
from gflow.dynamics.solvers import RKC2


def test_flow_decreases_loss_and_reports_stats(setup):
    loss, model = setup
    tr = solve_flow(
        loss,
        model,
        t1=5.0,
        ts=np.linspace(0, 5, 11),
        solver=diffrax.Tsit5(),
        rtol=1e-8,
        atol=1e-10,
    )
    assert tr.status == "success" and tr.ok
    assert tr.t.shape == (11,) and tr.metrics["loss"].shape == (11,)
    assert np.all(np.diff(tr.metrics["loss"]) < 0)  # a gradient flow never goes up
    assert tr.metrics["loss"][0] == pytest.approx(float(loss(model)), rel=1e-12)
    assert tr.metrics["loss"][-1] == pytest.approx(float(loss(tr.final)), rel=1e-12)
    s = tr.stats
    assert s["num_accepted_steps"] + s["num_rejected_steps"] == s["num_steps"] > 0
    assert s["grad_evals"] == 1 + 6 * s["num_steps"]  # Tsit5: 7 stages, FSAL
    assert tr.final.W_E.dtype == jnp.float64


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_gd_converges_to_flow_at_order_one(setup):
    """GD with step η sits at the flow time Σ η; its error at fixed T halves with η"""
    loss, model = setup
    T = 2.0
    errors = []
    for eta in (0.04, 0.02, 0.01):
        steps = int(round(T / eta))
        opt = optax.inject_hyperparams(optax.sgd)(learning_rate=eta)
        gd = gflow.run_optimizer(
            loss, model, opt, steps=steps, save_every=steps // 10, save_params=True
        )
        assert gd.t[-1] == pytest.approx(T, rel=1e-12)
        # the same number of save times each time: the flow compiles once
        flow = solve_flow(
            loss, model, t1=T, ts=gd.t, rtol=1e-10, atol=1e-12, save_params=True
        )
        dist = gflow.parameter_distance(flow, gd)
        assert dist["total"][0] == 0.0
        errors.append(dist["total"][-1])
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert np.all(np.abs(ratios - 2.0) < 0.15), (errors, ratios)


@pytest.mark.slow
def test_max_steps_keeps_partial_trajectory(setup):
    loss, model = setup
    tr = solve_flow(loss, model, t1=50.0, ts=np.linspace(0, 50, 51), max_steps=8)
    assert tr.status == "max_steps"
    assert 1 <= len(tr) < 51
    assert tr.stats["t_reached"] < 50.0
    assert np.all(np.isfinite(tr.metrics["loss"]))


class _Exploding(eqx.Module):
    """L = -|W_E|⁴: its flow blows up in finite time (at t = 1/(8|W_E(0)|²))."""

    def __call__(self, model):
        return -(jnp.sum(model.W_E**2) ** 2)


@pytest.mark.slow
def test_blow_up_is_reported_not_raised(setup):
    """The solve stops at the blow-up time t* = 1/(8 s0), s0 = |W_E(0)|², with a status.

    s = |W_E|² obeys ds/dt = 8 s², so s(t) = s0 / (1 - 8 s0 t): the step size
    collapses at t*, the step budget runs out there and the part before is kept.
    """
    _, model = setup
    t_star = 1.0 / (8.0 * float(jnp.sum(model.W_E**2)))
    tr = solve_flow(
        _Exploding(), model, t1=1e6, ts=[0.0, t_star / 2, 1e6], max_steps=1000
    )
    assert tr.status == "max_steps"
    assert tr.stats["t_reached"] == pytest.approx(t_star, rel=1e-4)
    # the saves before t* are kept and exact: L = -s², s(t*/2) = 2 s0
    s0 = 1.0 / (8.0 * t_star)
    np.testing.assert_allclose(tr.t, [0.0, t_star / 2])
    np.testing.assert_allclose(
        tr.metrics["loss"], [-(s0**2), -((2 * s0) ** 2)], rtol=1e-5
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"t1": 0.0}, "t1"),
        ({"t1": 1.0, "ts": [0.5, 2.0]}, "ts"),
        ({"t1": 1.0, "ts": [0.5, 0.2]}, "non-decreasing"),
        ({"t1": 1.0, "rtol": 0.0}, "rtol"),
        ({"t1": 1.0, "max_steps": 0}, "max_steps"),
    ],
)
def test_bad_arguments(setup, kwargs, match):
    loss, model = setup
    with pytest.raises(ValueError, match=match):
        solve_flow(loss, model, **kwargs)


@pytest.mark.slow
def test_same_configuration_gives_bit_identical_results(setup):
    loss, model = setup
    kw = dict(t1=5.0, ts=np.linspace(0, 5, 11), rtol=1e-8, atol=1e-10)
    a, b = solve_flow(loss, model, **kw), solve_flow(loss, model, **kw)
    np.testing.assert_array_equal(a.metrics["loss"], b.metrics["loss"])
    for x, y in zip(jax.tree.leaves(a.final), jax.tree.leaves(b.final)):
        np.testing.assert_array_equal(x, y)
    fresh = AttentionModel.init(
        d_vocab=3, d_model=3, init_scale=0.3, key=jax.random.key(1)
    )
    c = solve_flow(loss, fresh, **kw)  # same seed, a model drawn anew
    np.testing.assert_array_equal(a.metrics["loss"], c.metrics["loss"])


@pytest.mark.parametrize(
    "solver, per_step",
    [
        (diffrax.Euler(), 1),
        (diffrax.Heun(), 2),  # two stages, not first-same-as-last
        (diffrax.Tsit5(), 6),  # seven stages, FSAL
        (diffrax.Dopri5(), 6),
        (diffrax.Dopri8(), 13),  # fourteen stages, not FSAL... as Diffrax tabulates
        (diffrax.Kvaerno5(), None),  # implicit: Newton iterations vary
    ],
)
def test_grad_evals_per_step_from_the_tableau(solver, per_step):
    from gflow.dynamics import grad_evals_per_step

    tableau = getattr(solver, "tableau", None)
    if tableau is not None and not tableau.implicit:
        per_step = tableau.num_stages - int(tableau.fsal)
    assert grad_evals_per_step(solver) == per_step


@pytest.mark.slow
def test_euler_with_constant_steps_is_gradient_descent(setup):
    """Euler at h = η is GD at η step for step: same clock, same parameters."""
    loss, model = setup
    eta, steps = 0.1, 10
    flow = solve_flow(
        loss,
        model,
        t1=eta * steps,
        ts=[0.0, eta * steps],
        solver=diffrax.Euler(),
        dt0=eta,
        stepsize_controller=diffrax.ConstantStepSize(),
        observables={"wq": lambda m: jnp.sum(m.W_Q)},
    )
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=eta)
    gd = gflow.run_optimizer(loss, model, opt, steps=steps, save_every=steps)
    assert flow.status == "success"
    np.testing.assert_allclose(flow.final.W_E, gd.final.W_E, rtol=1e-12)
    np.testing.assert_allclose(flow.final.W_K, gd.final.W_K, rtol=1e-12)
    np.testing.assert_allclose(flow.metrics["loss"], gd.metrics["loss"], rtol=1e-12)
    np.testing.assert_allclose(flow.metrics["grad_norm"], gd.metrics["grad_norm"])
    assert flow.metrics["wq"][-1] == pytest.approx(float(jnp.sum(gd.final.W_Q)))
    s = flow.stats
    assert (s["num_steps"], s["num_rejected_steps"]) == (steps, 0)
    assert s["grad_evals"] == 1 + steps and s["t_reached"] == pytest.approx(1.0)
    assert s["max_steps"] == 1_000_000 and flow.params is None  # the defaults
    assert flow.info == {
        "kind": "flow",
        "solver": "Euler",
        "rtol": 1e-6,
        "atol": 1e-8,
        "t0": 0.0,
        "t1": 1.0,
    }


@pytest.mark.slow
def test_default_save_times_and_a_later_start(setup):
    loss, model = setup
    tr = solve_flow(loss, model, t0=1.0, t1=3.0, save_params=True)
    np.testing.assert_allclose(tr.t, np.linspace(1.0, 3.0, 201))
    assert tr.params.W_E.shape == (201, *model.W_E.shape)
    np.testing.assert_array_equal(tr.params.W_E[0], model.W_E)
    assert tr.info["t0"] == 1.0 and tr.stats["t_reached"] == 3.0
    with pytest.raises(ValueError, match="ts"):
        solve_flow(loss, model, t0=1.0, t1=3.0, ts=[0.5, 3.0])


class _FailingEuler(diffrax.Euler):
    """Euler whose steps from t = 0.5 on report a singular system."""

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        *out, result = super().step(terms, t0, t1, y0, args, solver_state, made_jump)
        return *out, diffrax.RESULTS.where(t0 >= 0.5, diffrax.RESULTS.singular, result)


@pytest.mark.slow
def test_statuses_for_a_failed_and_a_non_finite_solve(setup):
    """A solver's failure is 'failed' with the part before kept; NaN parameters make
    any ending 'diverged'."""
    loss, model = setup
    constant = diffrax.ConstantStepSize()
    tr = solve_flow(
        loss,
        model,
        t1=1.0,
        ts=np.linspace(0, 1, 11),
        solver=_FailingEuler(),
        dt0=0.1,
        stepsize_controller=constant,
    )
    assert tr.status == "failed"
    np.testing.assert_allclose(tr.t, np.linspace(0, 0.5, 6))

    class _NaNAfter(eqx.Module):
        def __call__(self, m):
            # finite loss, NaN gradient once |W_E|² has grown past 2.25x its start
            x = jnp.sum(m.W_E**2)
            return -x + jnp.where(x > 2.25 * x0, jnp.sqrt(-x), 0.0)

    x0 = float(jnp.sum(model.W_E**2))
    for solver, budget in (
        (diffrax.Euler(), 1000),
        (_FailingEuler(), 1000),
        (diffrax.Euler(), 50),
    ):  # the last one runs out of steps
        tr = solve_flow(
            _NaNAfter(),
            model,
            t1=2.0,
            dt0=0.01,
            solver=solver,
            stepsize_controller=constant,
            max_steps=budget,
        )
        assert tr.status == "diverged"


class _Indexed(eqx.Module):
    """A model with an integer leaf: only the float leaves flow."""

    W: jax.Array
    idx: jax.Array


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_non_float_leaves_stay_put_and_reach_the_loss():
    """L = Σ_k (W[idx_k] - 1)²: the indexed entries relax as 1 + (W0 - 1) e^{-2t}."""
    model = _Indexed(W=jnp.zeros(4), idx=jnp.asarray([1, 3]))
    tr = solve_flow(
        lambda m: jnp.sum((m.W[m.idx] - 1.0) ** 2),
        model,
        t1=1.0,
        ts=[0.0, 1.0],
        rtol=1e-10,
        atol=1e-12,
    )
    np.testing.assert_allclose(
        tr.final.W, [0, 1 - np.exp(-2), 0, 1 - np.exp(-2)], rtol=1e-8, atol=1e-12
    )
    np.testing.assert_array_equal(tr.final.idx, [1, 3])


def test_progress_meter_choice(monkeypatch):
    from gflow.dynamics.flow import _progress_meter

    assert isinstance(_progress_meter(False), diffrax.NoProgressMeter)
    bar = _progress_meter(True)
    assert isinstance(bar, diffrax.TqdmProgressMeter) and bar.refresh_steps == 200
    monkeypatch.setattr("sys.stderr.isatty", lambda: False)
    assert isinstance(_progress_meter(None), diffrax.NoProgressMeter)
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    assert isinstance(_progress_meter(None), diffrax.TqdmProgressMeter)


@pytest.mark.slow
def test_evaluations_of_a_solve_whose_only_step_was_rejected(setup):
    """No accepted step: the count is the solver state's (RKC2's cold start, 1 + 2·30
    evaluations), with nothing to charge the rejected step from."""
    loss, model = setup
    tr = solve_flow(
        loss,
        model,
        t1=50.0,
        dt0=50.0,
        solver=RKC2(),
        max_steps=1,
        ts=[0.0, 50.0],
    )
    assert tr.status == "max_steps"
    assert (tr.stats["num_steps"], tr.stats["num_accepted_steps"]) == (1, 0)
    assert tr.stats["grad_evals"] == 1 + 2 * 30


def test_evaluations_per_step_of_other_solvers(unchecked):  # duck-typed solvers
    from gflow.dynamics import grad_evals_per_step

    class Counted:
        grad_evals_per_step = 3

    assert grad_evals_per_step(Counted()) == 3
    assert grad_evals_per_step(object()) is None


@pytest.mark.parametrize(
    "t0, t1, ts, ok",
    [
        (0.0, 100.0, [0.0, 100.0 + 5e-8], True),  # within 1e-9 relative of t1
        (0.0, 0.5, [0.0, 0.5 + 8e-10], True),  # within 1e-9 absolute below 1
        (0.0, 0.5, [0.0, 0.5 + 1.5e-9], False),
        (-100.0, 0.001, [-100.0 - 5e-8, 0.0], True),  # relative to |t0|
        (0.0, 1.0, [[0.0, 1.0]], False),  # not 1-D
    ],
)
@pytest.mark.slow
def test_save_times_tolerate_clock_round_off_only(setup, t0, t1, ts, ok, unchecked):
    loss, model = setup
    if not ok:
        with pytest.raises(ValueError, match="ts"):
            solve_flow(loss, model, t0=t0, t1=t1, ts=ts)
        return
    tr = solve_flow(loss, model, t0=t0, t1=t1, ts=ts, atol=0.0, rtol=1e-3)
    np.testing.assert_allclose(tr.t, [t0, t1] if t0 == 0 else [t0, 0.0])
