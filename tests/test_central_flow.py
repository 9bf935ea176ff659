"""The central flow of GD (gflow.dynamics.references.central) against closed forms,
finite differences and GD itself on a problem with a known edge-of-stability orbit."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gflow.dynamics import solve_flow
from gflow.dynamics.references import (
    CentralFlowReference,
    central_velocity,
    solve_complementarity,
    third_derivatives,
    top_eigenpairs,
)


def _quadratic(n=12, seed=0, top=1.5):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    lam = np.linspace(0.05, top, n)
    A = (Q * lam) @ Q.T
    return jnp.asarray(A), rng.normal(size=n)


@pytest.mark.slow
def test_below_the_edge_it_is_the_gradient_flow_in_closed_form_at_fourth_order():
    # λ_max = 1.5 < 0.975 · 2/η for η = 1: X = 0 and dw/dt = −A w exactly
    A, w0 = _quadratic()
    times = np.arange(0, 21) * 1.0
    lam, V = np.linalg.eigh(np.asarray(A))
    exact = np.stack([V @ (np.exp(-lam * t) * (V.T @ w0)) for t in times])
    errors = []
    for substeps in (4, 8):
        traj = CentralFlowReference(substeps=substeps).solve_one(
            lambda w: 0.5 * w @ A @ w, jnp.asarray(w0), times, 1.0
        )
        assert traj.status == "success"
        errors.append(np.abs(np.asarray(traj.params) - exact).max())
        np.testing.assert_allclose(traj.metrics["lambda_max"], lam[-1], rtol=1e-8)
        np.testing.assert_allclose(traj.metrics["predicted_loss"], traj.metrics["loss"])
    assert errors[1] < 1e-5
    assert 12 < errors[0] / errors[1] < 20  # RK4: halving dt divides it by ~16


def test_krylov_eigenpairs_equal_the_dense_ones():
    A, _ = _quadratic(n=40, seed=1, top=3.0)
    w = jnp.zeros(40)
    U0 = jax.random.normal(jax.random.key(1), (40, 3))
    lam, U = top_eigenpairs(lambda x: 0.5 * x @ A @ x, w, U0, 100)
    dense, V = np.linalg.eigh(np.asarray(A))
    np.testing.assert_allclose(lam, dense[::-1][:3], rtol=1e-9)
    overlap = np.abs(np.sum(np.asarray(U) * V[:, ::-1][:, :3], axis=0))
    np.testing.assert_allclose(overlap, 1.0, atol=1e-7)


def test_third_derivatives_equal_finite_differences():
    def f(w):
        return jnp.sum(jnp.sin(w[:-1] * w[1:])) + 0.1 * jnp.sum(w**4)

    rng = np.random.default_rng(2)
    w = jnp.asarray(rng.normal(size=7))
    U = jnp.asarray(np.linalg.qr(rng.normal(size=(7, 2)))[0])
    T = jax.jit(lambda w: third_derivatives(f, w, U))(w)  # compiled, as in a solve

    @jax.jit
    def quad(x, i, j):
        return U[:, i] @ jax.hessian(f)(x) @ U[:, j]

    h = 1e-5
    for i, j in [(0, 0), (0, 1), (1, 1)]:
        fd = [
            (quad(w + h * e, i, j) - quad(w - h * e, i, j)) / (2 * h) for e in np.eye(7)
        ]
        np.testing.assert_allclose(T[i, j], fd, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(T[j, i], T[i, j])


def test_complementarity_one_eigenvalue_is_the_closed_form():
    # k = 1: x = max(0, b / a) with a = ½ ⟨T, T⟩
    G = jnp.full((1, 1, 1, 1), 4.0)
    one = jnp.ones((1, 1))
    solve = jax.jit(solve_complementarity, static_argnums=4)  # one program for both
    for b, expected in [(3.0, 1.5), (-3.0, 0.0)]:
        X = solve(G, jnp.full((1, 1), b), one, 0 * one, 200)
        np.testing.assert_allclose(X, [[expected]], atol=1e-12)


def test_complementarity_conditions_hold_for_two_eigenvalues():
    rng = np.random.default_rng(3)
    T = rng.normal(size=(2, 2, 9))
    T = 0.5 * (T + T.transpose(1, 0, 2))
    flat = T.reshape(4, -1)
    G = jnp.asarray((flat @ flat.T).reshape(2, 2, 2, 2))
    b = jnp.asarray([[1.0, 0.3], [0.3, -0.2]])
    X = jax.jit(solve_complementarity, static_argnums=4)(
        G, b, jnp.ones((2, 2)), jnp.zeros((2, 2)), 3000
    )
    S = (0.5 * G.reshape(4, 4) @ X.reshape(-1)).reshape(2, 2) - b
    assert np.linalg.eigvalsh(np.asarray(X)).min() > -1e-10
    assert np.linalg.eigvalsh(np.asarray(S)).min() > -1e-8
    assert abs(float(jnp.sum(X * S))) < 1e-8
    assert float(jnp.trace(X)) > 0.1  # the constraint is active


def test_the_central_velocity_of_a_cubic_is_its_closed_form():
    """One dimension, f(w) = a w²/2 + c w³/6: f' = a w + c w²/2, λ = a + c w,
    T = c, so below the edge (λ < active · 2/η) the velocity is −f' and X = 0, and
    at it X = max(0, b / (c²/2)) with b = −c f' + (restore/η)(λ − 2/η), and the
    velocity is −f' − X c/2 (the default suite's oracle of ``central_velocity``;
    the slow tests run it inside whole central flows)."""
    a, c = 1.0, 0.5
    w = jnp.asarray([-0.3])

    def f(x):
        return a * x[0] ** 2 / 2 + c * x[0] ** 3 / 6

    grad, lam = a * -0.3 + c * 0.09 / 2, a + c * -0.3
    cfg = CentralFlowReference(qp_iters=400)
    U, X = jnp.ones((1, 1)), jnp.zeros((1, 1))
    # one compiled program for both step sizes (lr traced), as inside a solve
    velocity = jax.jit(lambda lr: central_velocity(cfg, f, w, U, X, lr))
    v, _, lam_got, X_got, extra = velocity(1.0)  # edge 2
    np.testing.assert_allclose(lam_got, [lam], rtol=1e-12)
    np.testing.assert_allclose(v, [-grad], rtol=1e-12)
    assert float(X_got[0, 0]) == 0.0 and float(extra) == 0.0
    lr = 2.0 / (0.98 * lam) / 1.02  # λ ≥ 0.975 · 2/η and above the edge: 2/η < λ
    edge = 2.0 / lr
    b = -c * grad + (cfg.restore / lr) * (lam - edge)
    x = max(0.0, b / (c * c / 2))
    assert x > 0.1  # the constraint is active
    v, _, _, X_got, extra = velocity(lr)
    np.testing.assert_allclose(X_got, [[x]], rtol=1e-9)
    np.testing.assert_allclose(v, [-grad - x * c / 2], rtol=1e-9)
    np.testing.assert_allclose(extra, x * lam / 2, rtol=1e-9)


def test_an_inactive_eigenvalue_gets_no_covariance():
    G = jnp.eye(4).reshape(2, 2, 2, 2)
    b = jnp.asarray([[1.0, 0.5], [0.5, 1.0]])
    mask = jnp.asarray([[1.0, 0.0], [0.0, 0.0]])
    X = jax.jit(solve_complementarity, static_argnums=4)(
        G, b * mask, mask, jnp.zeros((2, 2)), 500
    )
    np.testing.assert_allclose(X, [[2.0, 0.0], [0.0, 0.0]], atol=1e-10)


C = 0.05  # the sharpening drive of the edge-of-stability problem below


def _eos_loss(w):
    """L(x, y) = y (1 − cos x) − c y: the sharpness along x is y cos x, and the flow
    raises y at rate c − (1 − cos x). GD at step η settles on a period-2 orbit in x
    with y just above 2/η and ⟨1 − cos x⟩ = c (self-stabilisation)."""
    return w[1] * (1.0 - jnp.cos(w[0])) - C * w[1]


def _gd(w0, eta, steps):
    grad = jax.jit(jax.grad(_eos_loss))
    out = [jnp.asarray(w0)]
    for _ in range(steps):
        out.append(out[-1] - eta * grad(out[-1]))
    return np.asarray(out)


@pytest.mark.slow
def test_gd_past_the_edge_follows_the_central_flow_not_the_gradient_flow():
    eta, steps = 0.5, 400
    w0 = jnp.asarray([0.3, 3.8])
    times = np.arange(steps + 1) * eta
    gd = _gd(w0, eta, steps)
    central = CentralFlowReference().solve_one(_eos_loss, w0, times, eta)
    cw = np.asarray(central.params)
    assert central.status == "success"
    # the central flow holds the sharpness at 2/η once it gets there
    late = times >= 50
    np.testing.assert_allclose(central.metrics["lambda_max"][late], 2 / eta, atol=1e-6)
    np.testing.assert_allclose(cw[late, 0], 0.0, atol=1e-8)
    # the gradient flow: x decays, y climbs at rate c without bound
    grad_flow = solve_flow(
        _eos_loss, w0, t1=times[-1], ts=times, save_params=True, progress=False
    )
    gw = np.asarray(grad_flow.params)
    assert gw[-1, 1] > 2 / eta + 5
    # GD stays near the central flow, far from the gradient flow, after the crossing
    d_central = np.linalg.norm(gd - cw, axis=1)[late]
    d_flow = np.linalg.norm(gd - gw, axis=1)[late]
    assert np.all(d_central < 0.4)
    assert d_central[-1] < 0.05 * d_flow[-1]
    # and its time-averaged loss is the one the central flow predicts (≈ 0 here)
    gd_loss = np.asarray(jax.vmap(_eos_loss)(jnp.asarray(gd)))
    window = slice(steps - 100, steps)
    predicted = central.metrics["predicted_loss"][window].mean()
    assert abs(gd_loss[window].mean() - predicted) < 0.02
    assert abs(central.metrics["loss"][-1] - predicted) > 0.15  # L alone misses it


def test_settings_are_checked():
    with pytest.raises(ValueError, match="active"):
        CentralFlowReference(active=0.0)
    with pytest.raises(ValueError, match="substeps"):
        CentralFlowReference(substeps=0)
    ref = CentralFlowReference()
    with pytest.raises(ValueError, match="times"):
        ref.solve_one(_eos_loss, jnp.zeros(2), np.array([2.0, 1.0]), 0.5)
    with pytest.raises(ValueError, match="lr"):
        ref.solve_one(_eos_loss, jnp.zeros(2), np.array([0.0, 1.0]), 0.0)
    assert ref.hyperparams(0.3) == {"learning_rate": 0.3}


@pytest.mark.slow
def test_compare_cli_writes_the_central_comparison(tmp_path, capsys):
    from gflow.cli import main

    out = tmp_path / "cmp"
    argv = ["compare", "--lr", "1", "--t1", "3", "--num-saves", "4"]
    assert main([*argv, "--reference", "central", "--out", str(out)]) == 0
    report = json.loads((out / "compare.json").read_text())
    central = report["central"]
    # below the edge (λ_max ≈ 0.46 < 2/η) the central flow is the gradient flow
    assert central["final_error"] == pytest.approx(report["final_error"], rel=1e-3)
    assert len(central["lambda_max"]) == 4
    assert 0.3 < central["lambda_max"][0] < 0.6
    assert (out / "central_metrics.npz").exists()
    assert "central flow: max distance" in capsys.readouterr().out
    assert main([*argv, "--optimizer", "adamw", "--reference", "central"]) == 2
    assert "no central flow for 'adamw'" in capsys.readouterr().err


def test_sweep_config_takes_the_central_reference_of_its_optimizer():
    from gflow.runs import REFERENCES, SweepConfig, reference_of

    assert REFERENCES["central"] is CentralFlowReference
    assert reference_of(SweepConfig(reference="central")) == CentralFlowReference()
    with pytest.raises(ValueError, match="no central flow"):
        SweepConfig(optimizer="adamw", reference="central")


@pytest.mark.slow
def test_sweep_cli_gives_distances_to_both_flows(tmp_path):
    from gflow.cli import main

    out = tmp_path / "sweep"
    argv = ["sweep", "--lrs", "1,0.5", "--t1", "4", "--num-saves", "5"]
    assert main([*argv, "--reference", "central", "--out", str(out)]) == 0
    members = json.loads((out / "sweep.json").read_text())["members"]
    for rec in members:
        # below the edge the central flow is the gradient flow
        assert rec["final_error"] == pytest.approx(rec["flow_final_error"], rel=1e-3)
        assert rec["flow_error"] >= rec["flow_final_error"] > 0
