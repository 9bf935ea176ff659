"""Oracle tests of the stiff solvers: closed forms, convergence order, dense λ_max,
and the default flow against a tight Dopri8 reference on a short horizon."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gflow import AttentionModel, MarkovChain, PopulationLoss, solve_flow
from gflow.analysis import dense_hessian, flatten
from gflow.dynamics.solvers import RKC2, StiffSwitch

LAMBDAS = jnp.geomspace(0.01, 1e4, 40)


def _linear(t, y, args):
    """y' = -diag(λ) y + sin t: stiff (λ up to 1e4), with a closed-form solution."""
    return {"a": -LAMBDAS * y["a"] + jnp.sin(t)}


def _linear_exact(t):
    lam = np.asarray(LAMBDAS)
    # particular solution (λ sin t - cos t)/(1 + λ²) plus the homogeneous part
    part = lambda s: (lam * np.sin(s) - np.cos(s)) / (1 + lam**2)  # noqa: E731
    return (1.0 - part(0.0)) * np.exp(-lam * t) + part(t)


def _solve(solver, *, t1, dt0=None, controller=None):
    return diffrax.diffeqsolve(
        diffrax.ODETerm(_linear),
        solver,
        t0=0.0,
        t1=t1,
        dt0=dt0,
        y0={"a": jnp.ones(40)},
        saveat=diffrax.SaveAt(t1=True, solver_state=True),
        stepsize_controller=controller or diffrax.ConstantStepSize(),
        max_steps=100_000,
    )


def _scalar(t, y, args):
    return -y + jnp.cos(t)


def test_rkc2_is_second_order():
    """Fixed steps on y' = -y + cos t (y(0) = 0): error ÷4 when h halves."""
    exact = (np.sin(2.0) + np.cos(2.0) - np.exp(-2.0)) / 2
    errs = []
    for h in (0.1, 0.05, 0.025):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(_scalar),
            RKC2(),
            t0=jnp.asarray(0.0),
            t1=jnp.asarray(2.0),
            dt0=jnp.asarray(h),
            y0=jnp.asarray(0.0),
            saveat=diffrax.SaveAt(t1=True),
            max_steps=1000,
        )
        errs.append(abs(float(sol.ys[-1]) - exact))
    ratios = np.array(errs[:-1]) / np.array(errs[1:])
    assert np.all((ratios > 3.5) & (ratios < 4.5)), (errs, ratios)


@pytest.mark.slow
def test_rkc2_adaptive_meets_tolerance_with_few_evaluations():
    """PID-controlled RKC2 is accurate, stable (hρ ≫ Tsit5's limit), and cheap.

    Its global error is well above the local rtol (3.2e-5 at rtol 1e-6 when measured):
    second order, one error estimate per step. StiffSwitch's stiff_error_scale exists
    for that reason."""
    t1 = 20.0
    ctrl = diffrax.PIDController(rtol=1e-6, atol=1e-9)
    sol = _solve(RKC2(), t1=t1, controller=ctrl)
    err = np.abs(np.asarray(sol.ys["a"][-1]) - _linear_exact(t1)).max()
    assert err < 1e-4
    state = sol.solver_state
    assert float(state.rho) == pytest.approx(1e4, rel=0.05)  # tracked λ_max
    assert int(state.max_stages) > 10  # it did take stabilised steps
    tsit = _solve(diffrax.Tsit5(), t1=t1, controller=ctrl)
    tsit_evals = 6 * int(tsit.stats["num_steps"])
    assert int(state.num_evals) < tsit_evals / 3, (int(state.num_evals), tsit_evals)


def test_rkc2_spectral_radius_matches_dense_hessian():
    """The power-iteration ρ after init equals λ_max of the dense Hessian."""
    chain = MarkovChain.from_lambda(pi=(0.6, 0.3, 0.1), lam=0.5)
    model = AttentionModel.init(
        d_vocab=3, d_model=3, init_scale=0.8, key=jax.random.key(2)
    )
    loss = PopulationLoss(chain)
    x0, unravel = flatten(model)
    evals = np.linalg.eigvalsh(np.asarray(eqx.filter_jit(dense_hessian)(loss, model)))
    field = diffrax.ODETerm(lambda t, x, args: -jax.grad(lambda z: loss(unravel(z)))(x))
    # the 300 power iterations compiled once, not run op by op
    state = jax.jit(
        lambda x0: RKC2(init_power_iters=300).init(field, 0.0, 1.0, x0, None)
    )(x0)
    assert float(state.rho) == pytest.approx(np.abs(evals).max(), rel=1e-3)


def test_bad_solver_settings():
    with pytest.raises(ValueError, match="safety"):
        RKC2(safety=0.5)
    with pytest.raises(ValueError, match="max_stages"):
        RKC2(max_stages=1)
    with pytest.raises(ValueError, match="explicit"):
        StiffSwitch(explicit=diffrax.Euler())
    with pytest.raises(ValueError, match="stiff_error_scale"):
        StiffSwitch(stiff_error_scale=0.0)


@pytest.mark.slow
def test_stiff_error_scale_tightens_only_the_stiff_steps():
    """On the stiff linear system, scaling RKC2's error estimate by 100 makes the
    solve far more accurate (against the closed form) at a moderate cost."""
    t1 = 20.0
    ctrl = diffrax.PIDController(rtol=1e-6, atol=1e-9)
    errs, evals = [], []
    for scale in (1.0, 100.0):
        sol = _solve(StiffSwitch(stiff_error_scale=scale), t1=t1, controller=ctrl)
        errs.append(np.abs(np.asarray(sol.ys["a"][-1]) - _linear_exact(t1)).max())
        evals.append(int(sol.solver_state.num_evals))
    assert errs[1] < errs[0] / 5, errs
    assert evals[0] < evals[1] < 20 * evals[0], evals


@pytest.fixture(scope="module")
def default_flow():
    chain = MarkovChain.default()
    model = AttentionModel.init(
        d_vocab=4, d_model=32, init_scale=1e-3, key=jax.random.key(0)
    )
    return PopulationLoss(chain), model


@pytest.mark.slow
def test_stiff_switch_flow_matches_dopri8_reference(default_flow):
    """Through condensation and focus (t = 120): StiffSwitch's final parameters and
    saved losses agree with Dopri8 at rtol 1e-10."""
    loss, model = default_flow
    kw = dict(t1=120.0, ts=np.linspace(0.0, 120.0, 25), progress=False)
    ref = solve_flow(loss, model, solver=diffrax.Dopri8(), rtol=1e-10, atol=1e-12, **kw)
    tr = solve_flow(loss, model, solver=StiffSwitch(), rtol=1e-6, atol=1e-8, **kw)
    assert tr.status == "success" and tr.info["solver"] == "StiffSwitch"
    x_ref = np.asarray(flatten(ref.final)[0])
    err = np.linalg.norm(np.asarray(flatten(tr.final)[0]) - x_ref)
    assert err < 1e-4 * np.linalg.norm(x_ref), err
    np.testing.assert_allclose(tr.metrics["loss"], ref.metrics["loss"], atol=1e-6)
    assert tr.stats["grad_evals"] > 6 * tr.stats["num_steps"]  # Tsit5 + ρ tracking


# --- single steps against closed forms -------------------------------------------
LAM = jnp.asarray([0.5, 3.0, 40.0, 400.0])


def _decay(t, y, args):
    return -LAM * y


def _one_step(solver, h, y0=None, made_jump=False):
    """One step of ``solver`` on y' = -λ y from y0 (ones) over [0, h], jitted."""
    y0 = jnp.ones(4) if y0 is None else y0
    return _init_and_step(solver, jnp.asarray(h), y0, made_jump)


@eqx.filter_jit
def _init_and_step(solver, h, y0, made_jump):
    """Compiled once per solver's settings (equal settings share the program, h and
    y0 are traced), not once per call."""
    term = diffrax.ODETerm(_decay)
    state = solver.init(term, 0.0, h, y0, None)
    return state, solver.step(term, 0.0, h, y0, None, state, made_jump)


def test_rkc2_step_is_stable_with_the_stages_it_picks():
    """With s = num_stages(h ρ) every mode λ ≤ ρ is damped: |y1/y0| ≤ 1, and the
    stage count is the documented 1 + ⌊√(1 + 1.54 h ρ)⌋."""
    from gflow.dynamics.solvers import num_stages

    h = 0.5  # h ρ = 200 for ρ = 400: far outside Tsit5's interval
    state, (y1, y_error, _, new_state, result) = _one_step(RKC2(), h)
    assert result == diffrax.RESULTS.successful
    assert float(state.rho) == pytest.approx(400.0, rel=1e-6)
    s = 1 + int(np.floor(np.sqrt(1 + 1.54 * 1.2 * 400.0 * h)))  # safety 1.2
    assert int(num_stages(jnp.asarray(1.2 * 400.0 * h))) == s
    assert int(new_state.max_stages) == s
    # track: one product (2 evaluations); advance: s - 1 stages and f(y1)
    assert int(new_state.num_evals) == int(state.num_evals) + 2 + s
    assert np.all(np.abs(np.asarray(y1)) <= 1.0)
    # the slow mode is accurate: second order in h λ
    assert float(y1[0]) == pytest.approx(np.exp(-0.5 * h), abs=(0.5 * h) ** 3)
    # Sommeijer et al.'s embedded estimate (12 (y0 - y1) + 6 h (f0 + f1)) / 15
    f0, f1 = _decay(0.0, jnp.ones(4), None), _decay(h, y1, None)
    expected = (12 * (1.0 - y1) + 6 * h * (f0 + f1)) / 15
    np.testing.assert_allclose(y_error, expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(new_state.f0, f1, rtol=1e-12)


def test_rkc2_rejects_a_step_that_needs_too_many_stages():
    _, (_, y_error, _, _, _) = _one_step(RKC2(max_stages=5), 0.5)
    assert np.all(np.isinf(np.asarray(y_error)))
    _, (_, y_error, _, _, _) = _one_step(RKC2(max_stages=40), 0.5)
    assert np.all(np.isfinite(np.asarray(y_error)))


def test_rkc2_restarts_its_power_iteration_on_a_zero_jacobian():
    """f = const has J = 0: ρ = 0 and the iteration vector falls back to the fixed
    unit start vector, so tracking can resume."""
    term = diffrax.ODETerm(lambda t, y, args: jnp.ones_like(y))
    y0 = jnp.zeros(3)

    # compiled rather than run op by op; traced twice, so that a start vector
    # drawn anew at each call would differ
    def init():
        return jax.jit(
            lambda y0: RKC2(init_power_iters=3).init(term, 0.0, 1.0, y0, None)
        )(y0)

    state = init()
    assert float(state.rho) == 0.0
    assert float(jnp.linalg.norm(state.v)) == pytest.approx(1.0, rel=1e-12)
    again = init()
    np.testing.assert_array_equal(state.v, again.v)  # deterministic
    # a jump recomputes f0 and counts that evaluation
    track = jax.jit(lambda y0, state: RKC2().track(term, 0.0, y0, None, state, True))
    tracked = track(y0, state)
    assert int(tracked.num_evals) == int(state.num_evals) + 2 + 1
    np.testing.assert_allclose(tracked.f0, jnp.ones(3))


@pytest.mark.parametrize("h, stiff", [(0.001, False), (0.006, True), (0.5, True)])
def test_stiff_switch_takes_the_explicit_step_until_h_rho_leaves_its_interval(h, stiff):
    """With ρ = 400 and safety 1.2: h ρ = 0.48 takes a Tsit5 step, bit for bit;
    1.2 h ρ = 2.88 (just above the interval 2.5) and 240 take RKC2 steps, whose
    error estimates are scaled by stiff_error_scale."""
    switch = StiffSwitch(stiff_error_scale=7.0)
    _, (y1, err, _, state, _) = _one_step(switch, h)
    if stiff:
        _, (y_ref, err_ref, _, ref_state, _) = _one_step(RKC2(), h)
        np.testing.assert_allclose(err, 7.0 * err_ref, rtol=1e-12)
        assert int(state.num_evals) == int(ref_state.num_evals)
    else:
        tsit = diffrax.Tsit5()
        _, (y_ref, err_ref, _, _, _) = _one_step(tsit, h)
        np.testing.assert_allclose(err, err_ref, rtol=1e-12, atol=1e-18)
        init = RKC2().init(diffrax.ODETerm(_decay), 0.0, h, jnp.ones(4), None)
        assert int(state.num_evals) == int(init.num_evals) + 2 + switch.explicit_evals
        assert switch.explicit_evals == 6
        np.testing.assert_allclose(state.f0, _decay(h, y1, None), rtol=1e-12)
    np.testing.assert_allclose(y1, y_ref, rtol=1e-12)


def test_more_bad_solver_settings():
    for kw in ({"power_iters": 0}, {"init_power_iters": 0}):
        with pytest.raises(ValueError, match="power_iters"):
            RKC2(**kw)
    with pytest.raises(ValueError, match="explicit"):
        StiffSwitch(explicit=diffrax.Kvaerno5())  # implicit
    with pytest.raises(ValueError, match="stability"):
        StiffSwitch(stability=0.0)
    assert RKC2(safety=1.0).safety == 1.0 and RKC2(max_stages=2).max_stages == 2
    assert RKC2(power_iters=1, init_power_iters=1).init_power_iters == 1
    assert StiffSwitch().order(None) == RKC2().order(None) == 2


@pytest.mark.slow
def test_solvers_pass_time_and_args_to_the_vector_field():
    """y' = -a y + t with args a: func, RKC2 and StiffSwitch see t and a."""
    term = diffrax.ODETerm(lambda t, y, a: -a * y + t)
    y = jnp.arange(4.0)
    for solver in (RKC2(), StiffSwitch()):
        np.testing.assert_array_equal(solver.func(term, 0.3, y, LAM), -LAM * y + 0.3)
        sol = diffrax.diffeqsolve(
            term,
            solver,
            t0=0.0,
            t1=1.0,
            dt0=0.001,
            y0=jnp.ones(4),
            args=LAM,
            saveat=diffrax.SaveAt(t1=True),
            stepsize_controller=diffrax.PIDController(rtol=1e-7, atol=1e-10),
        )
        lam = np.asarray(LAM)
        # y = (1 + 1/a²) e^{-a t} + t/a - 1/a²
        exact = (1 + 1 / lam**2) * np.exp(-lam) + 1 / lam - 1 / lam**2
        np.testing.assert_allclose(sol.ys[-1], exact, rtol=1e-3)


@pytest.mark.slow
def test_stage_counts_at_their_edges():
    """s = 1 + ⌊√(1 + 1.54 h ρ)⌋: 2 for a non-stiff step, 3 up to h ρ = 8/1.54."""
    from gflow.dynamics.solvers import num_stages

    for h_rho, s in ((0.0, 2), (5.0, 3), (5.1, 3), (5.2, 4), (240.0, 20)):
        assert int(num_stages(jnp.asarray(h_rho))) == s, h_rho
    # a step sized by a small ρ: 1.2 h ρ = 6 with ρ = 0.5 gives 4 stages
    term = diffrax.ODETerm(lambda t, y, args: -0.5 * y)
    y0 = jnp.ones(2)
    state = RKC2().init(term, 0.0, 10.0, y0, None)
    *_, new, _ = RKC2().step(term, 0.0, 10.0, y0, None, state, False)
    assert int(new.max_stages) == 4
    *_, new, _ = RKC2().step(term, 0.0, 0.1, y0, None, state, False)
    assert int(new.max_stages) == 2  # never fewer than two stages
    # exactly max_stages stages are allowed; the count never exceeds it
    _, (_, err, _, new, _) = _one_step(RKC2(max_stages=20), 0.5)
    assert np.all(np.isfinite(np.asarray(err))) and int(new.max_stages) == 20
    _, (_, err, _, new, _) = _one_step(RKC2(max_stages=19), 0.5)
    assert np.all(np.isinf(np.asarray(err))) and int(new.max_stages) == 19


@pytest.mark.slow
def test_rkc2_step_is_its_chebyshev_stability_polynomial():
    """On y' = -λ y one s-stage step multiplies y by R_s(-h λ), R_s(z) = a_s + b_s
    T_s(w0 + w1 z), with w0 = 1 + ε/s², w1 = T_s'(w0)/T_s''(w0),
    b_s = T_s''(w0)/T_s'(w0)² and a_s = 1 - b_s T_s(w0) (Verwer et al.'s RKC2)."""
    from numpy.polynomial import chebyshev as C

    from gflow.dynamics.solvers import DAMPING

    for h in (0.003, 0.05, 0.5):
        _, (y1, *_, state, _) = _one_step(RKC2(), h)
        s = int(state.max_stages)
        T = np.zeros(s + 1)
        T[-1] = 1.0
        w0 = 1.0 + DAMPING / s**2
        d1, d2 = C.chebval(w0, C.chebder(T)), C.chebval(w0, C.chebder(T, 2))
        w1, b = d1 / d2, d2 / d1**2
        a = 1.0 - b * C.chebval(w0, T)
        R = a + b * C.chebval(w0 - w1 * h * np.asarray(LAM), T)
        np.testing.assert_allclose(y1, R, rtol=1e-9, atol=1e-14)
