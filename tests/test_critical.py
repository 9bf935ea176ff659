"""Critical points, Hessian spectra and the linearised flow (analysis/critical.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from gflow import AttentionModel, MarkovChain, PopulationLoss
from gflow.analysis import (
    block_weights,
    extreme_eigenpairs,
    hessian_spectrum,
    linearised_flow,
    newton_critical_point,
)

PI = np.array([0.75, 0.19, 0.05, 0.01])
M_WIDTH = 3


@pytest.fixture(scope="module")
def setup():
    chain = MarkovChain.from_lambda(pi=PI, lam=0.5)
    loss = PopulationLoss(chain)
    model = AttentionModel.init(
        d_vocab=4, d_model=M_WIDTH, init_scale=1e-3, key=jax.random.key(0)
    )
    return chain, loss, model


def test_spectrum_at_the_origin_is_plus_minus_sigma0(setup):
    """At θ = 0, L ≈ ⟨G, W_E W_P⟩ with G = π(1/d − π)ᵀ: eigenvalues ±σ₀, m each."""
    _, loss, model = setup
    zero = jax.tree.map(jnp.zeros_like, model)
    lam, V = hessian_spectrum(loss, zero)
    sigma0 = np.linalg.norm(PI) * np.linalg.norm(PI - 0.25)
    np.testing.assert_allclose(lam[-M_WIDTH:], sigma0, rtol=1e-10)
    np.testing.assert_allclose(lam[:M_WIDTH], -sigma0, rtol=1e-10)
    np.testing.assert_allclose(lam[M_WIDTH:-M_WIDTH], 0.0, atol=1e-12)
    w = block_weights(zero, V[:, :M_WIDTH])
    np.testing.assert_allclose(w["W_E"] + w["W_P"], 1.0, atol=1e-10)
    np.testing.assert_allclose(w["W_Q"] + w["W_K"], 0.0, atol=1e-10)
    np.testing.assert_allclose(w["W_E"], 0.5, atol=1e-10)  # a balanced E/P mode


def test_lanczos_extremes_match_dense(setup, key):
    _, loss, model = setup
    start = jax.tree.map(lambda x: 300 * x, model)  # a generic point, ε·300
    lam, _ = hessian_spectrum(loss, start)
    ritz, _ = extreme_eigenpairs(loss, start, key=key, iters=60)
    assert float(ritz[-1]) == pytest.approx(lam[-1], rel=1e-8)
    assert float(ritz[0]) == pytest.approx(lam[0], rel=1e-8)


def test_newton_finds_the_saddle_manifold_at_the_origin(setup):
    """Near θ = 0, ∇L = 0 means W_Eᵀπ = 0 and W_P(1/d − π) = 0 (G = π(1/d − π)ᵀ)."""
    _, loss, model = setup
    crit, norms = newton_critical_point(loss, model, iters=10)
    assert norms[-1] < 1e-12 < norms[0]
    assert np.linalg.norm(np.asarray(crit.W_E).T @ PI) < 1e-8
    assert np.linalg.norm(np.asarray(crit.W_P) @ (0.25 - PI)) < 1e-8
    assert np.linalg.norm(np.asarray(model.W_E).T @ PI) > 1e-4  # it had to move


def test_linearised_flow_matches_the_matrix_exponential():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(6, 6))
    H = (A + A.T) / 2
    lam, V = np.linalg.eigh(H)
    d0 = rng.normal(size=6)
    ts = np.array([0.0, 0.3, 1.7])
    pred = linearised_flow(lam, V, d0, ts)
    for i, t in enumerate(ts):
        np.testing.assert_allclose(pred[i], scipy.linalg.expm(-H * t) @ d0, rtol=1e-9)
