import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gflow import (
    AttentionModel,
    MarkovChain,
    population_logits,
    population_loss,
    sequence_loss,
)
from gflow.problems import population_attention

# jit whole computations: op-by-op dispatch compiles every primitive separately
seq_value_and_grad = eqx.filter_jit(eqx.filter_value_and_grad(sequence_loss))
jit_sequence_loss = eqx.filter_jit(sequence_loss)


def _zero_model(d=4, m=8):
    z = jnp.zeros
    return AttentionModel(W_E=z((d, m)), W_Q=z((m, m)), W_K=z((m, m)), W_P=z((m, d)))


def test_loss_at_zero_is_log_d():
    chain = MarkovChain.default()
    assert float(population_loss(_zero_model(), chain)) == pytest.approx(
        np.log(4), 1e-14
    )
    tokens = chain.sample(key=jax.random.key(0), batch=16, length=9)
    assert float(sequence_loss(_zero_model(), tokens)) == pytest.approx(
        np.log(4), 1e-14
    )


def test_population_loss_matches_numpy_formula(key):
    chain = MarkovChain.from_lambda(pi=(0.5, 0.3, 0.2), lam=0.3)
    m = AttentionModel.init(d_vocab=3, d_model=4, init_scale=0.8, key=key, tau=0.7)
    E, P_ = np.asarray(m.W_E), np.asarray(m.W_P)
    M = E @ P_
    Phi = E @ np.asarray(m.W_Q) @ np.asarray(m.W_K).T @ E.T
    loss = 0.0
    for i in range(3):
        w = chain.pi * np.exp(0.7 * Phi[i])
        a = w / w.sum()
        f = a @ M
        logp = f - np.log(np.exp(f).sum())
        loss += chain.pi[i] * (chain.P[i] * -logp).sum()
    assert float(population_loss(m, chain)) == pytest.approx(loss, rel=1e-12)
    # the residual ablation adds the query's own row of M to its logits
    res = AttentionModel(m.W_E, m.W_Q, m.W_K, m.W_P, tau=0.7, residual=True)
    f = np.stack(
        [(w := chain.pi * np.exp(0.7 * Phi[i])) / w.sum() @ M + M[i] for i in range(3)]
    )
    np.testing.assert_allclose(population_logits(res, chain.pi), f, rtol=1e-10)


def test_gradient_matches_central_differences(key):
    chain = MarkovChain.default()
    m = AttentionModel.init(d_vocab=4, d_model=3, init_scale=0.5, key=key)
    grads = eqx.filter_grad(population_loss)(m, chain)
    params, static = eqx.partition(m, eqx.is_inexact_array)
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    gflat, _ = jax.flatten_util.ravel_pytree(eqx.filter(grads, eqx.is_inexact_array))

    def f(x):
        return float(population_loss(eqx.combine(unravel(x), static), chain))

    h = 1e-6
    rng = np.random.default_rng(0)
    for i in rng.choice(flat.size, size=12, replace=False):
        e = jnp.zeros_like(flat).at[i].set(h)
        fd = (f(flat + e) - f(flat - e)) / (2 * h)
        assert gflat[i] == pytest.approx(fd, rel=1e-6, abs=1e-9)


def test_condensation_gradient_at_zero():
    """At θ = 0 attention gets no gradient and dL/dM = π(1/d·1 − π)ᵀ (MODEL.md §6)."""
    chain = MarkovChain.default()
    pi, d = chain.pi, 4
    # dL/dM through a model with M as free d×d matrix: W_E = I, W_P = M (m = d).
    eye = jnp.eye(d)
    model = AttentionModel(
        W_E=eye, W_Q=jnp.zeros((d, d)), W_K=jnp.zeros((d, d)), W_P=jnp.zeros((d, d))
    )
    g = eqx.filter_grad(population_loss)(model, chain)
    expected = np.outer(pi, np.full(d, 1 / d) - pi)
    np.testing.assert_allclose(g.W_P, expected, atol=1e-14)
    assert np.linalg.matrix_rank(np.asarray(g.W_P), tol=1e-10) == 1
    sigma0 = np.linalg.norm(pi) * np.linalg.norm(pi - 1 / d)
    assert np.linalg.svd(np.asarray(g.W_P), compute_uv=False)[0] == pytest.approx(
        sigma0
    )
    g0 = eqx.filter_grad(population_loss)(_zero_model(), chain)
    assert float(jnp.abs(g0.W_Q).max()) == 0.0 and float(jnp.abs(g0.W_K).max()) == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("all_positions", [False, True])
@pytest.mark.parametrize("residual", [False, True])
def test_dense_and_gathered_forms_agree(key, all_positions, residual):
    chain = MarkovChain.default()
    m = AttentionModel.init(
        d_vocab=4, d_model=6, init_scale=0.7, key=key, residual=residual
    )
    tokens = chain.sample(key=jax.random.key(5), batch=32, length=17)
    a, ga = seq_value_and_grad(m, tokens, all_positions=all_positions, dense=True)
    b, gb = seq_value_and_grad(m, tokens, all_positions=all_positions, dense=False)
    assert float(a) == pytest.approx(float(b), rel=1e-12)
    for x, y in zip(jax.tree.leaves(ga), jax.tree.leaves(gb)):
        np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("all_positions", [False, True])
def test_dense_form_of_an_unfactorised_model_with_tau(key, all_positions):
    """The type-count form also holds for a stored W_A and τ ≠ 1 (vocabulary 5, so a
    short context misses some types: their counts are 0)."""
    m = AttentionModel.init(
        d_vocab=5, d_model=7, init_scale=0.8, key=key, tau=0.7, factorised=False
    )
    tokens = jax.random.randint(jax.random.key(6), (12, 4), 0, 5)
    a, ga = seq_value_and_grad(m, tokens, all_positions=all_positions, dense=True)
    b, gb = seq_value_and_grad(m, tokens, all_positions=all_positions, dense=False)
    assert float(a) == pytest.approx(float(b), rel=1e-12)
    for x, y in zip(jax.tree.leaves(ga), jax.tree.leaves(gb)):
        np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-12)


def test_last_position_gathered_form_is_the_model_call(key):
    m = AttentionModel.init(d_vocab=4, d_model=6, init_scale=0.7, key=key)
    tokens = jnp.array([[0, 1, 2, 3, 1], [3, 3, 0, 1, 2]])
    logits = jax.vmap(m)(tokens[:, :-1])
    logp = jax.nn.log_softmax(logits)
    expected = -(logp[0, 1] + logp[1, 2]) / 2
    assert float(sequence_loss(m, tokens, dense=False)) == pytest.approx(
        float(expected)
    )


def test_population_loss_is_the_long_sequence_limit(key):
    chain = MarkovChain.default()
    m = AttentionModel.init(d_vocab=4, d_model=4, init_scale=0.6, key=key)
    losses = []
    for s in (32, 512):
        tokens = chain.sample(key=jax.random.key(s), batch=4096, length=s + 1)
        losses.append(float(jit_sequence_loss(m, tokens)))
    exact = float(population_loss(m, chain))
    assert abs(losses[1] - exact) < 0.01
    assert abs(losses[1] - exact) < abs(losses[0] - exact) + 0.005


def test_population_attention_rows_are_distributions(key):
    chain = MarkovChain.default()
    m = AttentionModel.init(d_vocab=4, d_model=4, init_scale=0.6, key=key)
    a = population_attention(m, chain.pi)
    np.testing.assert_allclose(a.sum(axis=1), 1.0, atol=1e-14)
    # zero scores: attention equals the key frequencies
    np.testing.assert_allclose(
        population_attention(_zero_model(), chain.pi),
        np.tile(chain.pi, (4, 1)),
        atol=1e-15,
    )


def test_sequence_loss_rejects_bad_tokens(key, unchecked):
    m = AttentionModel.init(d_vocab=4, d_model=4, key=key)
    with pytest.raises(ValueError, match="tokens"):
        sequence_loss(m, jnp.zeros((3,), int))


@pytest.mark.parametrize("residual", [False, True])
def test_all_positions_objective_is_the_mean_over_prefixes(key, residual):
    """Causal attention at position j is the last-position model on the prefix ≤ j:
    the all-positions loss is the mean over j of -log p(x_{j+1} | x_1..x_j)."""
    m = AttentionModel.init(
        d_vocab=4, d_model=6, init_scale=0.9, key=key, residual=residual
    )
    tokens = jnp.array([[0, 1, 2, 3, 1, 0], [3, 3, 0, 1, 2, 2]])
    E, P_ = np.asarray(m.W_E), np.asarray(m.W_P)
    A = np.asarray(m.W_Q) @ np.asarray(m.W_K).T
    terms = []
    for row in np.asarray(tokens):
        for j in range(1, row.size):
            emb = E[row[:j]]  # the prefix x_1..x_j, [j, m]
            z = emb[-1] @ A @ emb.T
            a = np.exp(z - z.max())
            out = (a / a.sum()) @ emb + (emb[-1] if residual else 0.0)
            f = out @ P_
            terms.append(np.log(np.exp(f).sum()) - f[row[j]])
    for dense in (True, False):
        got = jit_sequence_loss(m, tokens, all_positions=True, dense=dense)
        assert float(got) == pytest.approx(np.mean(terms), rel=1e-12)


@pytest.mark.slow
def test_sequence_loss_module_keeps_its_options(key):
    from gflow import SequenceLoss

    chain = MarkovChain.default()
    m = AttentionModel.init(d_vocab=4, d_model=6, init_scale=0.7, key=key)
    tokens = chain.sample(key=jax.random.key(2), batch=8, length=7)
    for all_positions in (False, True):
        for dense in (None, False):
            fn = SequenceLoss(tokens, all_positions=all_positions, dense=dense)
            expected = jit_sequence_loss(
                m, tokens, all_positions=all_positions, dense=dense
            )
            assert float(fn(m)) == pytest.approx(float(expected), rel=1e-12)
    assert float(SequenceLoss(tokens, all_positions=True)(m)) != pytest.approx(
        float(SequenceLoss(tokens)(m)), rel=1e-6
    )


def test_a_one_token_context_is_a_bigram_lookup(key):
    """s = 1: the query attends to itself alone, so the logits are M[x_1]."""
    m = AttentionModel.init(d_vocab=4, d_model=6, init_scale=0.9, key=key)
    tokens = jnp.array([[0, 1], [2, 2], [3, 0]])
    M = np.asarray(m.M)
    logp = M - np.log(np.exp(M).sum(axis=1, keepdims=True))
    expected = -np.mean([logp[0, 1], logp[2, 2], logp[3, 0]])
    for dense in (True, False):
        got = jit_sequence_loss(m, tokens, dense=dense)
        assert float(got) == pytest.approx(expected, rel=1e-12)


def test_losses_accept_a_model_with_numpy_leaves(key):
    """A model loaded from disk holds numpy arrays; both losses take it as it is."""
    chain = MarkovChain.default()
    m = AttentionModel.init(d_vocab=4, d_model=6, init_scale=0.7, key=key)
    as_numpy = jax.tree.map(np.asarray, m)
    tokens = chain.sample(key=jax.random.key(3), batch=8, length=7)
    assert float(population_loss(as_numpy, chain)) == pytest.approx(
        float(population_loss(m, chain)), rel=1e-12
    )
    for all_positions in (False, True):
        assert float(
            sequence_loss(as_numpy, tokens, all_positions=all_positions)
        ) == pytest.approx(
            float(sequence_loss(m, tokens, all_positions=all_positions)), rel=1e-12
        )
