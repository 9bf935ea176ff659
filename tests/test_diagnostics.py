"""Known-answer tests for the stage observables (analysis/stage_observables.py)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gflow import AttentionModel, MarkovChain, population_loss
from gflow.analysis import (
    StageObservables,
    align_signs,
    cosine,
    effective_rank,
    entropy,
    sequence_attention,
    token_coordinates,
)
from gflow.dynamics import evaluate_metrics

PI = np.array([0.75, 0.19, 0.05, 0.01])


def _model(W_E, W_Q, W_K, W_P):
    return AttentionModel(
        W_E=jnp.asarray(W_E),
        W_Q=jnp.asarray(W_Q),
        W_K=None if W_K is None else jnp.asarray(W_K),
        W_P=jnp.asarray(W_P),
    )


def test_effective_rank_known_answers():
    assert float(effective_rank(jnp.array([3.0, 0.0, 0.0]))) == pytest.approx(1.0)
    assert float(effective_rank(jnp.array([2.0, 2.0, 2.0]))) == pytest.approx(3.0)
    val = float(effective_rank(jnp.array([1.0, 1.0, 0.0, 0.0])))
    assert val == pytest.approx(2.0)


def test_cosine():
    assert float(cosine(jnp.array([1.0, 0.0]), jnp.array([2.0, 2.0]))) == (
        pytest.approx(1 / np.sqrt(2))
    )
    a = jnp.arange(6.0).reshape(2, 3)
    assert float(cosine(a, -3 * a)) == pytest.approx(-1.0)


def test_token_coordinates_of_rank_one_embedding_is_pi():
    v = np.zeros(5)
    v[2] = 1.0
    W_E = -2.0 * np.outer(PI, v)  # sign of the factor must not matter
    c = np.asarray(token_coordinates(jnp.asarray(W_E), jnp.asarray(PI), 2))
    np.testing.assert_allclose(c[:, 0], 2.0 * PI, atol=1e-12)
    np.testing.assert_allclose(c[:, 1], 0.0, atol=1e-12)


def test_token_coordinates_rank_two_reconstructs_gram():
    key = jax.random.key(1)
    W_E = jax.random.normal(key, (4, 2)) @ jax.random.normal(key, (2, 6))
    c = token_coordinates(W_E, jnp.asarray(PI), 2)
    np.testing.assert_allclose(c @ c.T, W_E @ W_E.T, atol=1e-10)
    assert np.all(np.asarray(jnp.asarray(PI) @ c) > 0)  # the sign rule


def test_align_signs_undoes_flips():
    rng = np.random.default_rng(0)
    base = np.cumsum(0.01 * rng.normal(size=(50, 4, 2)), axis=0) + 1.0
    flips = rng.choice([-1.0, 1.0], size=(50, 1, 2))
    flips[0] = 1.0
    np.testing.assert_allclose(align_signs(base * flips), base)


def test_stage_observables_at_the_origin_of_attention():
    """W_A = 0: every attention row is π, the entropy is H(π), Φ = 0."""
    chain = MarkovChain.from_lambda(pi=PI, lam=0.5)
    m = 6
    u = np.zeros(m)
    u[0] = 1.0
    W_E = 3.0 * np.outer(PI, u)  # rank one along π
    W_P = np.outer(u, np.ones(4)) * 0.1
    model = _model(W_E, np.zeros((m, m)), 2 * np.eye(m), W_P)
    obs = eqx.filter_jit(StageObservables(chain))(model)  # as inside a solve
    np.testing.assert_allclose(obs["attention"], np.tile(PI, (4, 1)), atol=1e-12)
    np.testing.assert_allclose(obs["attention_on_top"], PI[0], atol=1e-12)
    h = float(entropy(jnp.asarray(PI)))
    assert float(obs["attention_entropy"]) == pytest.approx(h)
    assert float(obs["cos_u1_pi"]) == pytest.approx(1.0)
    assert float(obs["erank_W_E"]) == pytest.approx(1.0)
    assert float(obs["norm_W_Q"]) == 0.0
    assert float(obs["norm_W_K"]) == pytest.approx(2 * np.sqrt(m))
    assert float(obs["norm_W_A"]) == 0.0
    np.testing.assert_allclose(obs["sv_W_E"][0], 3 * np.linalg.norm(PI))
    np.testing.assert_allclose(obs["coords"][:, 0], 3 * PI, atol=1e-12)
    loss = float(eqx.filter_jit(population_loss)(model, chain))
    assert float(obs["unigram_gap"]) == pytest.approx(loss - chain.unigram_loss)
    assert float(obs["bayes_gap"]) == pytest.approx(loss - chain.bayes_loss)


def test_stage_observables_zero_model_gaps_and_phi_alignment():
    chain = MarkovChain.from_lambda(pi=PI, lam=0.5)
    m = 5
    u = np.zeros(m)
    u[0] = 1.0
    # Φ = W_E W_Q W_Kᵀ W_Eᵀ = ππᵀ for W_E = π uᵀ, W_Q = W_K = u uᵀ.
    model = _model(np.outer(PI, u), np.outer(u, u), np.outer(u, u), np.zeros((m, 4)))
    obs = eqx.filter_jit(StageObservables(chain))(model)
    assert float(obs["cos_Phi_pipi"]) == pytest.approx(1.0)
    # W_P = 0: logits are zero, the loss is log d.
    assert float(obs["unigram_gap"]) == pytest.approx(np.log(4) - chain.unigram_loss)
    s = np.asarray(obs["sv_W_A"])
    np.testing.assert_allclose(s, [1.0] + [0.0] * (m - 1), atol=1e-12)


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_stage_observables_unfactorised_and_singular_values():
    chain = MarkovChain.from_lambda(pi=PI, lam=0.5)
    key = jax.random.key(3)
    model = AttentionModel.init(
        d_vocab=4, d_model=8, init_scale=0.5, key=key, factorised=False
    )
    obs = StageObservables(chain)(model)
    W_A = np.asarray(model.W_A)
    assert float(obs["norm_W_A"]) == pytest.approx(np.linalg.norm(W_A))
    assert float(obs["norm_W_K"]) == pytest.approx(np.linalg.norm(W_A))
    np.testing.assert_allclose(
        obs["sv_W_A"], np.linalg.svd(W_A, compute_uv=False), rtol=1e-10
    )
    np.testing.assert_allclose(
        obs["sv_W_P"], np.linalg.svd(np.asarray(model.W_P), compute_uv=False)
    )


def test_stage_observables_inside_jit_through_evaluate_metrics(key):
    chain = MarkovChain.from_lambda(pi=PI, lam=0.5)
    model = AttentionModel.init(d_vocab=4, d_model=8, init_scale=0.3, key=key)
    loss_fn = lambda mdl: population_loss(mdl, chain)  # noqa: E731
    out = eqx.filter_jit(evaluate_metrics)(loss_fn, StageObservables(chain), model)
    assert out["coords"].shape == (4, 3)
    assert out["attention"].shape == (4, 4)
    np.testing.assert_allclose(np.sum(out["attention"], -1), 1.0)
    # |∇L| from evaluate_metrics matches a finite-difference directional derivative.
    g = eqx.filter_jit(eqx.filter_grad(loss_fn))(model)
    h = 1e-6
    shifted = jax.tree.map(lambda p, d: p + h * d, model, g)
    loss = eqx.filter_jit(loss_fn)  # one program for both values
    fd = (loss(shifted) - loss(model)) / h
    assert float(out["grad_norm"]) ** 2 == pytest.approx(float(fd), rel=1e-4)


def test_sequence_attention_rows():
    key = jax.random.key(2)
    model = AttentionModel.init(d_vocab=4, d_model=8, init_scale=0.0 + 1e-9, key=key)
    context = jnp.array([0, 1, 2, 0, 3])
    a = np.asarray(sequence_attention(model, context))
    expected = np.tril(np.ones((5, 5))) / np.arange(1, 6)[:, None]
    np.testing.assert_allclose(a, expected, atol=1e-8)
    model = AttentionModel.init(d_vocab=4, d_model=8, init_scale=1.0, key=key)
    a = np.asarray(sequence_attention(model, context))
    np.testing.assert_allclose(a.sum(-1), 1.0)
    assert np.all(np.triu(a, 1) == 0)
    # The last row is the attention of the model's own forward pass.
    emb = model.W_E[context]
    z = model.tau * (emb[-1] @ model.W_A) @ emb.T
    np.testing.assert_allclose(a[-1], jax.nn.softmax(z), rtol=1e-10)
