"""Oracle tests of the stiff solvers: closed forms, convergence order, dense λ_max,
and the default flow against a tight Dopri8 reference on a short horizon."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gflow import AttentionModel, MarkovChain, PopulationLoss, solve_flow
from gflow.hessian import dense_hessian, flatten
from gflow.solvers import RKC2, StiffSwitch

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
    evals = np.linalg.eigvalsh(np.asarray(dense_hessian(loss, model)))
    field = diffrax.ODETerm(lambda t, x, args: -jax.grad(lambda z: loss(unravel(z)))(x))
    state = RKC2(init_power_iters=300).init(field, 0.0, 1.0, x0, None)
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
