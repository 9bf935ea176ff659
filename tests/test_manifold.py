"""The rank-one invariant manifold and the asymmetry saddle (analysis/asymmetry.py)."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gflow import AttentionModel, MarkovChain, PopulationLoss
from gflow.analysis import (
    block_singular_values,
    embed_rank_one,
    flatten,
    rank_one_critical_point,
    rank_one_part,
    split_hessian,
    symmetric_chain,
    tangent_basis,
)
from gflow.dynamics import solve_flow

M_WIDTH = 5


def _small(seed=0, d=4):
    """A generic width-1 model: the coordinates (a, α, β, b) of a point of S_r."""
    k = jax.random.split(jax.random.key(seed), 4)
    return AttentionModel(
        W_E=jax.random.normal(k[0], (d, 1)),
        W_Q=jax.random.normal(k[1], (1, 1)),
        W_K=jax.random.normal(k[2], (1, 1)),
        W_P=jax.random.normal(k[3], (1, d)),
    )


def _direction(seed=3, m=M_WIDTH):
    r = np.random.default_rng(seed).normal(size=m)
    return r / np.linalg.norm(r)


def _same(x, y, tol):
    for a, b in zip(jax.tree.leaves(x), jax.tree.leaves(y)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=tol, rtol=0)


def test_embedding_is_an_isometry_and_the_projection_inverts_it():
    small, r = _small(), _direction()
    big = embed_rank_one(small, d_model=M_WIDTH, direction=r)
    _same(rank_one_part(big, direction=r), small, 1e-12)
    assert float(jnp.linalg.norm(flatten(big)[0])) == pytest.approx(
        float(jnp.linalg.norm(flatten(small)[0])), rel=1e-12
    )
    T = tangent_basis(big, direction=r)
    assert T.shape == (flatten(big)[0].size, 2 * 4 + 2)
    np.testing.assert_allclose(T.T @ T, np.eye(T.shape[1]), atol=1e-12)
    sv = block_singular_values(big)
    for name in ("W_E", "W_Q", "W_K", "W_P", "W_A"):
        assert sv[name][1] < 1e-14 * sv[name][0]


def test_gradient_steps_stay_on_the_manifold_and_match_width_one():
    """The gradient at a point of S_r lies in S_r, and it is the width-1 gradient:
    plain gradient steps from a point of S_r stay there (σ₂ of every block at
    round-off) and equal the width-1 steps, exactly."""
    loss = PopulationLoss(MarkovChain.default())
    small, r = _small(1), _direction()
    big = embed_rank_one(small, d_model=M_WIDTH, direction=r)

    @jax.jit
    def steps(model):
        def body(_, m):
            g = jax.grad(loss)(m)
            return jax.tree.map(lambda x, y: x - 0.05 * y, m, g)

        return jax.lax.fori_loop(0, 200, body, model)

    big_end, small_end = steps(big), steps(small)
    sv = block_singular_values(big_end)
    for name in ("W_E", "W_Q", "W_K", "W_P"):
        assert sv[name][1] < 1e-13 * sv[name][0], name
    _same(rank_one_part(big_end, direction=r), small_end, 1e-10)
    assert float(loss(big_end)) < float(loss(big)) - 1e-3  # it moved


@pytest.mark.slow
def test_the_flow_started_on_the_manifold_stays_there_and_follows_the_reduced_ode():
    chain = MarkovChain.default()
    loss = PopulationLoss(chain)
    small = jax.tree.map(lambda x: 0.3 * x, _small(2))
    r = _direction()
    ts = np.linspace(0.0, 200.0, 21)
    full = solve_flow(
        loss,
        embed_rank_one(small, d_model=M_WIDTH, direction=r),
        t1=200.0,
        ts=ts,
        save_params=True,
        rtol=1e-10,
        atol=1e-12,
        solver=diffrax.Tsit5(),
    )
    reduced = solve_flow(
        loss,
        small,
        t1=200.0,
        ts=ts,
        save_params=True,
        rtol=1e-10,
        atol=1e-12,
        solver=diffrax.Tsit5(),
    )
    assert full.metrics["loss"][-1] < full.metrics["loss"][0] - 0.1
    for i in range(ts.size):
        sv = block_singular_values(full.snapshot(i))
        for name in ("W_E", "W_Q", "W_K", "W_P"):
            assert sv[name][1] < 1e-12 * max(sv[name][0], 1.0), (i, name)
        _same(rank_one_part(full.snapshot(i), direction=r), reduced.snapshot(i), 1e-7)


def test_split_hessian_at_a_point_of_the_manifold():
    """Off a critical point S_r is still invariant for the flow, but H need not keep
    it: only at critical points does the split hold. At θ = 0 (critical) it does, and
    the ±σ₀ pairs of the (W_E, W_P) block are shared between the two parts."""
    chain = MarkovChain.default()
    loss = PopulationLoss(chain)
    zero = jax.tree.map(jnp.zeros_like, _small())
    big = embed_rank_one(zero, d_model=3)
    sp = split_hessian(loss, big)
    assert float(sp["leak"]) < 1e-12
    pi = chain.pi
    sigma0 = np.linalg.norm(pi) * np.linalg.norm(pi - 0.25)
    both = np.sort(np.concatenate([sp["tangential"], sp["transverse"]]))
    np.testing.assert_allclose(both[[0, -1]], [-sigma0, sigma0], rtol=1e-10)
    assert sp["tangential"][0] == pytest.approx(-sigma0, rel=1e-10)
    assert np.sum(np.isclose(sp["transverse"], -sigma0, rtol=1e-8)) == 2  # m − 1 = 2
    assert sp["transverse_vectors"].shape == (
        flatten(big)[0].size,
        sp["transverse"].size,
    )


def test_symmetric_chain():
    ch = symmetric_chain(0.02)
    np.testing.assert_allclose(ch.pi, [0.7, 0.12, 0.1, 0.08], atol=1e-12)
    with pytest.raises(ValueError, match="delta"):
        symmetric_chain(0.2)
    with pytest.raises(ValueError, match="base"):
        symmetric_chain(0.01, base=(0.7, 0.2, 0.05, 0.05))


@pytest.fixture(scope="module")
def stalls():
    """Width-1 critical points after cycle 1 for δ = 0, 1e-3, 2e-3."""
    out = {}
    for delta in (0.0, 1e-3, 2e-3):
        chain = symmetric_chain(delta)
        out[delta] = (chain, *rank_one_critical_point(chain, t1=3000.0))
    return out


@pytest.mark.slow
def test_the_symmetric_stall_is_degenerate_and_delta_opens_a_theta_delta_mode(stalls):
    lam = {}
    for delta, (chain, crit, norms) in stalls.items():
        loss = PopulationLoss(chain)
        assert norms[-1] < 1e-10
        assert float(loss(crit)) < chain.unigram_loss - 0.1  # past focus/dilution
        sp = split_hessian(loss, embed_rank_one(crit, d_model=2))
        assert float(sp["leak"]) < 1e-10
        lam[delta] = sp["transverse"]
    np.testing.assert_allclose(lam[0.0], 0.0, atol=1e-10)  # every transverse mode
    assert lam[1e-3][0] < -1e-6
    assert lam[2e-3][0] / lam[1e-3][0] == pytest.approx(2.0, rel=0.02)  # Θ(δ)
    # the same transverse eigenvalues at width 3, each m − 1 = 2 times
    chain, crit, _ = stalls[1e-3]
    wide = split_hessian(PopulationLoss(chain), embed_rank_one(crit, d_model=3))
    assert np.sum(np.isclose(wide["transverse"], lam[1e-3][0], rtol=1e-6)) == 2


def test_rank_one_part_is_the_orthogonal_projection():
    """embed(rank_one_part(θ)) = T Tᵀ θ for any θ, T the tangent basis of S_r."""
    k = jax.random.split(jax.random.key(5), 4)
    m, r = M_WIDTH, _direction()
    model = AttentionModel(
        W_E=jax.random.normal(k[0], (4, m)),
        W_Q=jax.random.normal(k[1], (m, m)),
        W_K=jax.random.normal(k[2], (m, m)),
        W_P=jax.random.normal(k[3], (m, 4)),
    )
    T = tangent_basis(model, direction=r)
    x = np.asarray(flatten(model)[0])
    proj = embed_rank_one(rank_one_part(model, direction=r), d_model=m, direction=r)
    np.testing.assert_allclose(np.asarray(flatten(proj)[0]), T @ (T.T @ x), atol=1e-12)
