"""The edge-of-stability signal (issue 32 point 5): the parabola through the loss at
0, 1 and 2 updates against the closed forms of a quadratic loss, GD above 2/η
reaching the edge along its own update, Adam's preconditioned metric against its
optax state, and the monitor's edge event."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gflow
from gflow.analysis import (
    AdamEdge,
    EdgeReading,
    GDEdge,
    MomentumEdge,
    edge_losses,
    edge_reading,
)

A = np.diag([4.0, 1.0, 0.25])  # Hessian of the quadratic
C = np.array([0.3, -0.2, 0.1])


def _quadratic(theta):
    return 0.5 * theta @ jnp.asarray(A) @ theta + jnp.asarray(C) @ theta


def test_the_parabola_is_exact_on_a_quadratic():
    theta = jnp.array([1.0, -2.0, 0.5])
    g = np.asarray(jax.grad(_quadratic)(theta))
    eta = 0.1
    u = -eta * g
    losses = edge_losses(_quadratic, theta, jnp.asarray(u))
    r = edge_reading(losses, GDEdge(eta).update_norm2(u), GDEdge(eta).threshold)
    assert isinstance(r, EdgeReading) and r.to_dict()["losses"] == list(losses)
    np.testing.assert_allclose(r.curvature, u @ A @ u, rtol=1e-10)
    np.testing.assert_allclose(r.slope, g @ u, rtol=1e-10)
    np.testing.assert_allclose(r.critical_step, -(g @ u) / (u @ A @ u / 2), rtol=1e-10)
    rayleigh = u @ A @ u / (u @ u)
    np.testing.assert_allclose(r.sharpness, rayleigh, rtol=1e-10)
    np.testing.assert_allclose(r.ratio, rayleigh * eta / 2, rtol=1e-10)
    assert r.sharpness <= 4.0  # a Rayleigh quotient of H: at most λ_max


def test_gd_above_two_over_eta_reaches_the_edge_along_its_update():
    """GD at η = 0.6 > 2/λ_max = 0.5: the update turns into the top eigenvector (its
    mode grows, |1 − 4η| = 1.4), the ratio tends to λ_max η / 2 = 1.2 and the
    critical step below 1 (the step overshoots). At η = 0.3 GD converges and the
    update turns into the slowest mode, λ = 0.25: the ratio tends to 0.0375 and
    never passes λ_max η / 2 = 0.6."""
    for eta, limit in ((0.6, 1.2), (0.3, 0.0375)):
        theta, ratios, steps = jnp.array([1.0, 1.0, 1.0]), [], []
        for _ in range(40):
            u = -eta * jax.grad(_quadratic)(theta)
            r = edge_reading(
                edge_losses(_quadratic, theta, u),
                GDEdge(eta).update_norm2(u),
                GDEdge(eta).threshold,
            )
            ratios.append(r.ratio)
            steps.append(r.critical_step)
            theta = theta + u
        assert max(ratios) <= 4.0 * eta / 2 + 1e-9
        np.testing.assert_allclose(ratios[-1], limit, rtol=1e-3)
        assert (steps[-1] < 1) == (limit > 1)


def test_adam_metric_is_the_preconditioner_of_its_state():
    b1, b2, eps = 0.9, 0.99, 1e-8
    opt = optax.adam(1e-2, b1=b1, b2=b2, eps=eps)
    theta = jnp.array([1.0, -2.0, 0.5])
    state = opt.init(theta)
    for _ in range(3):
        u, state = opt.update(jax.grad(_quadratic)(theta), state)
        theta = theta + u
    nu = np.asarray(state[0].nu)
    P = np.sqrt(nu / (1 - b2**3)) + eps
    edge = AdamEdge(1e-2, b1=b1, b2=b2, eps=eps)
    np.testing.assert_allclose(
        edge.update_norm2(u, state), np.sum(P * u * u), rtol=1e-10
    )
    np.testing.assert_allclose(edge.threshold, (2 + 2 * b1) / (1 - b1) / 1e-2)
    assert MomentumEdge(0.1, beta=0.5).threshold == pytest.approx(30.0)
    with pytest.raises(ValueError, match="state"):
        edge.update_norm2(u)


def test_bad_readings_are_refused():
    with pytest.raises(ValueError, match="finite"):
        edge_reading((1.0, np.nan, 1.0), 1.0, 1.0)
    with pytest.raises(ValueError, match="non-zero"):
        edge_reading((1.0, 0.9, 0.9), 0.0, 1.0)
    assert edge_reading((1.0, 0.9, 0.8), 1.0, 1.0).critical_step == np.inf  # no rise


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_the_monitor_reports_the_edge_of_gd_on_the_markov_loss(tmp_path):
    """GD on the paper's population loss with the edge signal on: the signals are
    recorded, the event carries its ratio ≥ 1, and the edge.jsonl file holds it."""
    chain = gflow.MarkovChain.default()
    model = gflow.AttentionModel.init(
        d_vocab=4, d_model=8, init_scale=0.5, key=jax.random.key(0)
    )
    probe = np.asarray(chain.sample(key=jax.random.key(1), batch=32, length=17))
    eta = 4.0  # large: the curvature along the update passes 2/η early
    opt = optax.sgd(eta)
    state = opt.init(eqx.filter(model, eqx.is_inexact_array))
    loss = gflow.PopulationLoss(chain)
    with gflow.Monitor(tmp_path / "m", every=1, verbose=False) as monitor:
        for step in range(30):
            grads = eqx.filter_grad(loss)(model)
            updates, state = opt.update(grads, state)
            monitor.observe(step, model, probe, update=updates, edge=GDEdge(eta))
            model = eqx.apply_updates(model, updates)
        with pytest.raises(ValueError, match="every observation"):
            monitor.observe(30, model, probe)
    traj, _, _ = gflow.load_monitor(tmp_path / "m")
    ratio = traj.metrics["edge_ratio"]
    assert ratio.shape == (30,) and np.all(np.isfinite(ratio))
    np.testing.assert_allclose(traj.metrics["edge_threshold"], 2 / eta)
    events = monitor.edge.events
    assert events and all(e["ratio"] >= 1 for e in events)
    first = events[0]["step"]
    assert np.all(ratio[:first] < 1) and ratio[first] >= 1
    assert (tmp_path / "m" / "edge.jsonl").read_text().count(
        "edge_of_stability"
    ) == len(events)
