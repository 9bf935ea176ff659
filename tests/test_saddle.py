"""The balanced unigram saddle and its block Hessian spectrum (analysis/saddle.py)."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gflow import MarkovChain, PopulationLoss
from gflow.analysis import (
    block_spectra,
    condensation_rate,
    extreme_eigenpairs,
    flatten,
    hessian_spectrum,
    linearised_flow,
    restricted_newton,
    saddle_rate,
    structure,
    unigram_saddle,
)
from gflow.dynamics import solve_flow

PI = np.array([0.75, 0.19, 0.05, 0.01])
M_WIDTH = 3


def _random_chain(seed, d=4):
    P = np.random.default_rng(seed).uniform(0.05, 1.0, (d, d))
    return MarkovChain(P / P.sum(axis=1, keepdims=True))


@pytest.fixture(scope="module")
def saddle():
    chain = MarkovChain.from_lambda(pi=PI, lam=0.5)
    loss = PopulationLoss(chain)
    model = unigram_saddle(chain, d_model=M_WIDTH, dtype=jnp.float64)
    return chain, loss, model


def _replace(model, **kw):
    return eqx.tree_at(lambda m: [getattr(m, k) for k in kw], model, list(kw.values()))


def _grad_norm(loss, model):
    g = jax.grad(loss)(model)
    return float(jnp.sqrt(sum(jnp.sum(x**2) for x in jax.tree.leaves(g))))


def test_the_saddle_is_a_critical_point_at_the_unigram_entropy(saddle):
    chain, loss, model = saddle
    assert _grad_norm(loss, model) < 1e-10
    entropy = -np.sum(PI * np.log(PI))  # H(π) from π, not from the chain
    assert float(loss(model)) == pytest.approx(entropy, abs=1e-12)
    # logits log π up to a constant, rank one, balanced, attention off
    v = PI @ np.asarray(model.M)
    np.testing.assert_allclose(v - v.mean(), np.log(PI) - np.log(PI).mean(), atol=1e-12)
    W_E, W_P = np.asarray(model.W_E), np.asarray(model.W_P)
    np.testing.assert_allclose(W_E.T @ W_E, W_P @ W_P.T, atol=1e-12)
    assert np.linalg.svd(W_E, compute_uv=False)[1] < 1e-14
    u1 = np.linalg.svd(W_E)[0][:, 0]
    assert abs(u1 @ PI) / np.linalg.norm(PI) == pytest.approx(1.0, abs=1e-12)
    assert not np.any(np.asarray(model.W_Q)) and not np.any(np.asarray(model.W_K))


def test_the_attention_block_has_plus_minus_c(saddle):
    chain, loss, model = saddle
    spec = block_spectra(loss, model)
    c = saddle_rate(chain)
    assert c > 0.05
    att = spec["attention"]
    np.testing.assert_allclose(att[:M_WIDTH], -c, rtol=1e-10)
    np.testing.assert_allclose(att[-M_WIDTH:], c, rtol=1e-10)
    np.testing.assert_allclose(att[M_WIDTH:-M_WIDTH], 0.0, atol=1e-12)
    assert spec["coupling"] < 1e-12  # the Hessian splits into the two blocks
    assert spec["embedding"][0] > -1e-12  # (W_E, W_P) block: no descent direction
    assert spec["full"][0] == pytest.approx(-c, rel=1e-10)


def test_c_matches_a_finite_difference_along_the_unstable_direction(saddle):
    """q = k = r xᵀ/√2 (r = e₁): (L(t) + L(−t) − 2L(0))/t² = vᵀHv = −c for γ < 0."""
    chain, loss, model = saddle
    x = np.arange(1.0, M_WIDTH + 1) / np.linalg.norm(np.arange(1.0, M_WIDTH + 1))
    q = np.zeros((M_WIDTH, M_WIDTH))
    q[0] = x / np.sqrt(2)
    curv = {}
    for sign in (1.0, -1.0):

        def at(t, sign=sign):
            return loss(
                _replace(model, W_Q=jnp.asarray(t * q), W_K=jnp.asarray(sign * t * q))
            )

        t = 1e-3
        curv[sign] = float((at(t) + at(-t) - 2 * at(0.0)) / t**2)
    c = saddle_rate(chain)
    assert sorted(curv.values()) == pytest.approx([-c, c], rel=1e-5)


def test_lanczos_agrees_with_dense_at_the_saddle(saddle, key):
    _, loss, model = saddle
    full = block_spectra(loss, model)["full"]
    ritz, _ = extreme_eigenpairs(loss, model, key=key, iters=40)
    assert float(ritz[0]) == pytest.approx(full[0], rel=1e-8)
    assert float(ritz[-1]) == pytest.approx(full[-1], rel=1e-8)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_any_chain_and_tau(seed):
    """For a generic P the point is still critical at H(π) and c (formula) equals
    the Hessian's; c scales with τ."""
    chain = _random_chain(seed)
    loss = PopulationLoss(chain)
    for tau in (1.0, 0.5):
        model = unigram_saddle(chain, d_model=2, tau=tau, dtype=jnp.float64)
        assert _grad_norm(loss, model) < 1e-10
        assert float(loss(model)) == pytest.approx(chain.unigram_loss, abs=1e-12)
        att = block_spectra(loss, model)["attention"]
        c = saddle_rate(chain, tau=tau)
        assert att[-1] == pytest.approx(c, rel=1e-9)
        assert att[0] == pytest.approx(-c, rel=1e-9)
    assert saddle_rate(chain, tau=0.5) == pytest.approx(saddle_rate(chain) / 2)


def test_restricted_newton_lands_on_a_unigram_critical_point(saddle):
    chain, loss, model = saddle
    rng = np.random.default_rng(0)
    start = _replace(
        model,
        W_E=model.W_E + 0.05 * rng.normal(size=model.W_E.shape),
        W_P=model.W_P + 0.05 * rng.normal(size=model.W_P.shape),
    )
    crit, norms = restricted_newton(loss, start)
    assert norms[0] > 1e-3 and norms[-1] < 1e-10
    assert _grad_norm(loss, crit) < 1e-10
    assert float(loss(crit)) == pytest.approx(chain.unigram_loss, abs=1e-12)


def test_condensation_rate_and_errors():
    chain = MarkovChain.from_lambda(pi=PI, lam=0.5)
    assert condensation_rate(chain) == pytest.approx(
        np.linalg.norm(PI) * np.linalg.norm(PI - 0.25)
    )
    with pytest.raises(ValueError, match="uniform"):
        unigram_saddle(MarkovChain.from_lambda(pi=(0.25,) * 4, lam=0.5), d_model=2)
    with pytest.raises(ValueError, match="unit vector"):
        unigram_saddle(chain, d_model=2, direction=np.ones(2))


def test_structure_known_answers(saddle):
    """At the saddle (plus a rank-one W_A along r): cos(u₁, π) = 1, rank one
    everywhere, W_A aligned with r rᵀ; an isotropic W_Q has effective rank m."""
    _, _, model = saddle
    r = np.eye(M_WIDTH)[0]
    aligned = _replace(
        model, W_Q=jnp.asarray(0.1 * np.outer(r, r)), W_K=jnp.eye(M_WIDTH)
    )
    s = structure(aligned, PI)
    assert s["cos_u1_pi"] == pytest.approx(1.0, abs=1e-12)
    for name in ("W_E", "W_P", "W_Q", "W_A"):
        assert s[f"ratio_{name}"] < 1e-12
    assert s["ratio_W_K"] == pytest.approx(1.0)
    assert s["erank_W_Q"] == pytest.approx(1.0)
    assert s["erank_W_K"] == pytest.approx(M_WIDTH)
    for key in ("align_left", "align_right", "align_rr"):
        assert s[key] == pytest.approx(1.0, abs=1e-12)
    # W_A = r r'ᵀ with r' ⊥ r: the right factor is misaligned
    other = _replace(
        model,
        W_Q=jnp.asarray(np.outer(r, r)),
        W_K=jnp.asarray(np.outer(np.eye(M_WIDTH)[1], r)),
    )
    s = structure(other, PI)
    assert s["align_left"] == pytest.approx(1.0) and s["align_right"] < 1e-12
    assert s["align_rr"] < 1e-12
    assert s["q_left"] == pytest.approx(1.0) and s["q_right"] == pytest.approx(1.0)
    # W_Q = r xᵀ with x ⊥ r: left factor along r, right factor not
    x = np.eye(M_WIDTH)[2]
    s = structure(_replace(model, W_Q=jnp.asarray(np.outer(r, x))), PI)
    assert s["q_left"] == pytest.approx(1.0) and s["q_right"] < 1e-12


@pytest.mark.slow
def test_the_linearised_flow_follows_the_real_flow_near_the_saddle(saddle):
    """exp(−Ht)δθ₀ against the flow from θ* + η·u: the error is O(η) relative."""
    chain, loss, model = saddle
    lam, V = hessian_spectrum(loss, model)
    x_star, unravel = flatten(model)
    u = np.random.default_rng(0).normal(size=x_star.size)
    u /= np.linalg.norm(u)
    ts = np.linspace(0.0, 30.0, 4)
    err = {}
    for eta in (1e-3, 1e-4):
        traj = solve_flow(
            loss,
            unravel(x_star + eta * u),
            t1=30.0,
            ts=ts,
            save_params=True,
            rtol=1e-11,
            atol=1e-13,
            solver=diffrax.Tsit5(),
        )
        actual = np.stack(
            [np.asarray(flatten(traj.snapshot(i))[0] - x_star) for i in range(4)]
        )
        pred = linearised_flow(lam, V, eta * u, ts)
        err[eta] = np.linalg.norm(actual - pred, axis=1) / np.linalg.norm(
            actual, axis=1
        )
    assert err[1e-4][-1] < 1e-3
    np.testing.assert_allclose(err[1e-3][1:] / err[1e-4][1:], 10.0, rtol=0.1)


def test_block_spectra_off_the_saddle(saddle, key):
    """At a generic point the blocks couple, and "full" is the dense spectrum."""
    _, loss, model = saddle
    k = jax.random.split(key, 2)
    generic = _replace(
        model,
        W_Q=0.5 * jax.random.normal(k[0], model.W_Q.shape),
        W_K=0.5 * jax.random.normal(k[1], model.W_K.shape),
    )
    spec = block_spectra(loss, generic)
    assert spec["coupling"] > 1e-3
    lam, _ = hessian_spectrum(loss, generic)
    np.testing.assert_allclose(spec["full"], lam, atol=1e-12)
    # Cauchy interlacing: each diagonal block's spectrum lies within the full one
    for name in ("embedding", "attention"):
        assert spec[name][0] >= lam[0] - 1e-12 and spec[name][-1] <= lam[-1] + 1e-12
