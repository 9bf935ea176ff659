import jax
import numpy as np
import pytest

from gflow import MarkovChain


def _random_chain(rng, d):
    P = rng.random((d, d)) ** 3 + 1e-3
    return P / P.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("d", [2, 3, 7, 20])
def test_stationary_distribution_of_random_chains(d):
    rng = np.random.default_rng(d)
    chain = MarkovChain(_random_chain(rng, d))
    np.testing.assert_allclose(chain.pi @ chain.P, chain.pi, atol=1e-13)
    assert chain.pi.sum() == pytest.approx(1.0, abs=1e-14)
    # the oracle: the limit of P^n has π in every row
    Pn = np.linalg.matrix_power(chain.P, 4096)
    np.testing.assert_allclose(Pn[0], chain.pi, atol=1e-10)


def test_from_lambda_structure_and_references():
    chain = MarkovChain.default()
    pi = np.array([0.75, 0.19, 0.05, 0.01])
    np.testing.assert_allclose(chain.pi, pi, atol=1e-14)
    np.testing.assert_allclose(
        chain.P, 0.5 * np.eye(4) + 0.5 * np.outer(np.ones(4), pi)
    )
    assert chain.unigram_loss == pytest.approx(-(pi * np.log(pi)).sum(), rel=1e-12)
    assert round(chain.unigram_loss, 4) == 0.7271
    assert round(chain.bayes_loss, 4) == 0.5536


@pytest.mark.parametrize(
    "P, match",
    [
        ([[0.5, 0.5, 0.0]], "square"),
        ([[0.5, 0.6], [0.5, 0.5]], "row 0 sums to 1.1"),
        ([[1.2, -0.2], [0.5, 0.5]], "non-negative"),
        ([[1.0, 0.0], [0.0, 1.0]], "reducible"),
        ([[np.nan, 1.0], [0.5, 0.5]], "finite"),
    ],
)
def test_bad_transition_matrices(P, match):
    with pytest.raises(ValueError, match=match):
        MarkovChain(P)


@pytest.mark.parametrize(
    "pi, lam, match",
    [
        ((0.5, 0.6), 0.5, "sum to 1"),
        ((1.2, -0.2), 0.5, "non-negative"),
        ((0.5, 0.5), 1.5, r"\[0, 1\]"),
        ((0.5, 0.5), -0.1, r"\[0, 1\]"),
    ],
)
def test_bad_lambda_chains(pi, lam, match):
    with pytest.raises(ValueError, match=match):
        MarkovChain.from_lambda(pi=pi, lam=lam)


def test_sampler_transition_counts_match_P():
    rng = np.random.default_rng(0)
    chain = MarkovChain(_random_chain(rng, 4))
    x = np.asarray(chain.sample(key=jax.random.key(1), batch=512, length=400))
    assert x.shape == (512, 400) and x.min() >= 0 and x.max() < 4
    counts = np.zeros((4, 4))
    np.add.at(counts, (x[:, :-1].ravel(), x[:, 1:].ravel()), 1)
    est = counts / counts.sum(axis=1, keepdims=True)
    # ~5e4 transitions per row: the standard error is below 0.003
    np.testing.assert_allclose(est, chain.P, atol=0.015)
    # x_1 ~ pi
    first = np.bincount(x[:, 0], minlength=4) / 512
    np.testing.assert_allclose(first, chain.pi, atol=0.07)


def test_sampler_is_deterministic():
    chain = MarkovChain.default()
    a = chain.sample(key=jax.random.key(3), batch=8, length=16)
    b = chain.sample(key=jax.random.key(3), batch=8, length=16)
    np.testing.assert_array_equal(a, b)
