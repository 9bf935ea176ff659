"""In-context Markov chains (gflow.InContextMarkov) and their observables
(gflow.analysis.strategy_distances, induction_labels): oracle tests.

The strategy losses are checked against an independent computation: for k = 2 the
prior over transition matrices is integrated numerically (Gauss–Legendre over the
two free entries, exact for the polynomial integrands of short sequences), each
matrix's sequences enumerated with their plain Markov probabilities, so the
Dirichlet-multinomial marginal of the library is not used.
"""

import itertools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gflow
from gflow.analysis import (
    InductionLabels,
    StrategyDistances,
    induction_labels,
    strategy_distances,
    strategy_kl,
)
from gflow.problems import STRATEGIES, InContextMarkov, StrategyLosses


def _prior_grid(alpha, nodes=12):
    """Gauss–Legendre nodes and weights of the Beta(α, α) prior of one entry of a
    2-state row (α = 1 or 2, whose densities are polynomials)."""
    x, w = np.polynomial.legendre.leggauss(nodes)
    a, w = (x + 1) / 2, w / 2
    density = {1.0: np.ones_like(a), 2.0: 6 * a * (1 - a)}[alpha]
    return a, w * density


def _integrated(alpha, length):
    """Per sequence of ``length`` 2-state tokens: its prior probability, by the
    numerical integral over P = [[1 - a, a], [b, 1 - b]]."""
    a, wa = _prior_grid(alpha)
    seqs = np.array(list(itertools.product(range(2), repeat=length)))
    A, B = np.meshgrid(a, a, indexing="ij")
    W = np.outer(wa, wa)
    P = np.stack([np.stack([1 - A, A], -1), np.stack([B, 1 - B], -1)], -2)
    prob = np.full(seqs.shape[0], 0.0)
    for n, x in enumerate(seqs):
        p = 0.5 * np.ones_like(A)
        for u in range(length - 1):
            p = p * P[..., x[u], x[u + 1]]
        prob[n] = np.sum(W * p)
    return seqs, prob


@pytest.mark.parametrize("alpha", [1.0, 2.0])
def test_strategy_losses_match_the_integral_over_the_dirichlet_prior(alpha):
    length = 6
    task = InContextMarkov(states=2, alpha=alpha)
    seqs, prob = _integrated(alpha, length)
    assert prob.sum() == pytest.approx(1.0, abs=1e-12)
    # the library's marginal equals the integral, sequence by sequence (both
    # compiled in one program rather than run op by op)
    marginal, q = eqx.filter_jit(
        lambda t, x: (t.sequence_probability(x), t.strategy_probabilities(x))
    )(task, jnp.asarray(seqs))
    np.testing.assert_allclose(marginal, prob, rtol=1e-10)
    q = np.asarray(q)[:, :, :-1]
    loss = -np.log(np.take_along_axis(q, seqs[None, :, 1:, None], -1)[..., 0])
    mean = np.einsum("n,gn->g", prob, loss.mean(-1))
    last = np.einsum("n,gn->g", prob, loss[:, :, -1])
    got = task.strategy_losses(length)
    assert isinstance(got, StrategyLosses) and got.exact
    np.testing.assert_allclose(got.mean, mean, rtol=1e-10)
    np.testing.assert_allclose(got.last, last, rtol=1e-10)
    # the bigram predictor is the posterior predictive: P(prefix, j) / P(prefix)
    _, prob_short = _integrated(alpha, length - 1)
    joint = prob.reshape(-1, 2)  # [prefixes of length - 1, next token]
    np.testing.assert_allclose(joint.sum(-1), prob_short, rtol=1e-10)
    bigram_last = q[2, ::2, -1]  # prefixes' predictive of the last token
    np.testing.assert_allclose(bigram_last, joint / prob_short[:, None], rtol=1e-10)
    # Bayes-optimal: below the others, above the known-matrix entropy
    assert got.of("bigram")[1] < got.of("unigram")[1] < got.of("uniform")[1]
    assert got.of("bigram")[1] > task.bayes_limit()


def test_first_position_closed_forms():
    k, a = 3, 0.5
    got = InContextMarkov(states=k, alpha=a).strategy_losses(2)
    # x_2 = x_1 with probability E P_ii = 1/k; the unigram counts x_1 once
    unigram = -(1 / k) * math.log((1 + a) / (1 + k * a)) - (1 - 1 / k) * math.log(
        a / (1 + k * a)
    )
    np.testing.assert_allclose(got.mean, (math.log(k), unigram, math.log(k)))
    np.testing.assert_allclose(got.last, got.mean)
    assert got.samples == k**2 and got.mean_se == (0.0, 0.0, 0.0)
    # ψ(kα + 1) − ψ(α + 1) = 1/2 for k = 2, α = 1 (H_2 − H_1)
    assert InContextMarkov(states=2).bayes_limit() == pytest.approx(0.5)


@pytest.mark.slow
def test_monte_carlo_agrees_with_the_enumeration():
    task = InContextMarkov(states=2, alpha=1.0)
    exact = task.strategy_losses(8)
    mc = task.strategy_losses(8, key=jax.random.key(0), samples=2000, exact_limit=1)
    assert not mc.exact and mc.samples == 2000
    for i in (1, 2):
        assert mc.mean_se[i] > 0 and mc.last_se[i] > 0
        assert abs(mc.mean[i] - exact.mean[i]) < 4 * mc.mean_se[i]
        assert abs(mc.last[i] - exact.last[i]) < 4 * mc.last_se[i]
    assert mc.mean[0] == pytest.approx(math.log(2))
    with pytest.raises(ValueError, match="pass key="):
        task.strategy_losses(8, exact_limit=1)
    with pytest.raises(ValueError, match="unknown strategy"):
        exact.of("trigram")


def test_strategy_probabilities_by_hand():
    task = InContextMarkov(states=3, alpha=0.5)
    x = jnp.array([[0, 1, 0, 1, 2]], dtype=jnp.int32)
    q = eqx.filter_jit(lambda t, x: t.strategy_probabilities(x))(task, x)
    q = np.asarray(q)[:, 0]
    # after x_0..x_3 = 0 1 0 1: counts (2, 2, 0) of 4; transitions out of 1: {1→0}
    np.testing.assert_allclose(q[0, 3], [1 / 3] * 3)
    np.testing.assert_allclose(q[1, 3], [2.5 / 5.5, 2.5 / 5.5, 0.5 / 5.5])
    np.testing.assert_allclose(q[2, 3], [1.5 / 2.5, 0.5 / 2.5, 0.5 / 2.5])
    # after 0 1 0: out of 0 one transition 0→1
    np.testing.assert_allclose(q[2, 2], [0.5 / 2.5, 1.5 / 2.5, 0.5 / 2.5])
    assert STRATEGIES == ("uniform", "unigram", "bigram")


def test_sample_is_a_markov_chain_of_its_own_matrix():
    task = gflow.InContextMarkov(states=3, alpha=1.0)
    key = jax.random.key(3)
    tokens, P = task.sample(key=key, batch=2, length=1500, return_matrices=True)
    assert tokens.dtype == jnp.int32 and tokens.shape == (2, 1500)
    np.testing.assert_allclose(P.sum(-1), 1.0, rtol=1e-12)
    assert bool((task.sample(key=key, batch=2, length=1500) == tokens).all())
    x = np.asarray(tokens)
    for b in range(2):
        counts = np.zeros((3, 3))
        np.add.at(counts, (x[b, :-1], x[b, 1:]), 1)
        rows = counts.sum(-1, keepdims=True)
        ok = rows[:, 0] > 150  # rows visited often enough to estimate
        assert ok.any()
        assert np.abs(counts / np.maximum(rows, 1) - P[b])[ok].max() < 0.12
    with pytest.raises(ValueError, match="states must be"):
        InContextMarkov(states=1)
    with pytest.raises(ValueError, match="alpha must be"):
        InContextMarkov(states=2, alpha=0.0)


def test_strategy_distances_vanish_on_the_strategy_itself():
    task = InContextMarkov(states=3, alpha=1.0)
    tokens = jnp.asarray(np.random.default_rng(1).integers(0, 3, (8, 30)), jnp.int32)
    # compiled once each, rather than run op by op; the references in numpy
    q = np.asarray(
        eqx.filter_jit(lambda t, x: t.strategy_probabilities(x))(task, tokens)
    )
    for g, name in enumerate(STRATEGIES):
        d = strategy_distances(task, jnp.log(q[g]), tokens)
        assert isinstance(d, StrategyDistances)
        assert getattr(d, name) == pytest.approx(0.0, abs=1e-12)
        others = [v for i, v in enumerate(d.as_tuple()) if i != g]
        assert min(others) > 1e-3
        target = np.eye(3)[np.asarray(tokens)[:, 1:]]  # one-hot
        loss = -(target * np.log(q[g][:, :-1])).sum(-1).mean()
        assert d.loss == pytest.approx(float(loss))
    # uniform logits: KL to the uniform predictor 0, to the bigram its mean KL
    kl = eqx.filter_jit(strategy_kl)(task, jnp.zeros((8, 30, 3)), tokens)
    bigram = q[2][:, :-1]
    expected = (bigram * np.log(bigram * 3)).sum(-1).mean()
    np.testing.assert_allclose(kl[0], 0.0, atol=1e-12)
    np.testing.assert_allclose(kl[2], expected, rtol=1e-10)
    with pytest.raises(ValueError, match="must be"):
        strategy_kl(task, jnp.zeros((8, 30, 2)), tokens)


def _patterns(tokens):
    """[b, 3, 1, n, n]: previous-token, induction (uniform over the positions after
    a copy of the query, else the query itself) and uniform causal attention."""
    b, n = tokens.shape
    x = np.asarray(tokens)
    prev = np.zeros((b, n, n))
    ind = np.zeros((b, n, n))
    uni = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    prev[:, 0, 0] = 1.0
    for bb in range(b):
        for i in range(n):
            if i:
                prev[bb, i, i - 1] = 1.0
            js = [j for j in range(1, i + 1) if x[bb, j - 1] == x[bb, i]]
            if js:
                ind[bb, i, js] = 1.0 / len(js)
            else:
                ind[bb, i, i] = 1.0
    stack = np.stack([prev, ind, np.broadcast_to(uni, prev.shape)], axis=1)
    return jnp.asarray(stack[:, :, None]), x, uni


def test_induction_labels_on_constructed_patterns(unchecked):
    tokens = jnp.asarray(np.random.default_rng(2).integers(0, 3, (3, 12)), jnp.int32)
    attention, x, uni = _patterns(tokens)
    labels = induction_labels(attention, tokens)
    assert isinstance(labels, InductionLabels)
    assert labels.previous.shape == labels.after_copy.shape == (3, 1)
    np.testing.assert_allclose(labels.previous[0, 0], 1.0)  # the previous-token head
    np.testing.assert_allclose(labels.after_copy[1, 0], 1.0)  # the induction head
    # uniform attention scores its chance level, and 1/i on the previous token
    np.testing.assert_allclose(labels.after_copy[2, 0], labels.after_copy_chance)
    np.testing.assert_allclose(labels.previous[2, 0], np.mean(1 / np.arange(2, 13)))
    # the chance level by hand
    num = den = 0.0
    for b in range(3):
        for i in range(12):
            e = sum(x[b, j - 1] == x[b, i] for j in range(1, i + 1))
            if e:
                num, den = num + e / (i + 1), den + 1
    assert labels.after_copy_chance == pytest.approx(num / den)
    # a previous-token head scores after-copy 1 only where x_{i-1} = x_i
    assert labels.after_copy[0, 0] < 1.0
    with pytest.raises(ValueError, match="must be"):
        induction_labels(attention[:, :, :, :5], tokens)


@pytest.mark.slow
def test_quick_experiment_writes_its_results(tmp_path):
    from experiments import icl_markov

    icl_markov.main(["--quick", "--out", str(tmp_path)])
    results = icl_markov.json.loads((tmp_path / "results.json").read_text())
    assert len(results["seeds"]) == 2
    assert all(len(s["rows"]) == 7 for s in results["seeds"])
    first = results["seeds"][0]["rows"][0]
    # at a 0.02 initialisation the model predicts nearly uniformly
    assert first["kl"][0] < 1e-2
    assert "bigram" in icl_markov.render(results)
