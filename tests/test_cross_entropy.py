"""The blocked cross-entropy of the output layer against the plain form
(log_softmax and a gather): value, gradient, Hessian-vector product and finite
differences, on blocks that do not divide the rows."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gflow.problems.losses as losses
from gflow import AttentionModel, sequence_loss
from gflow.problems import head_cross_entropy
from gflow.text import PositionalAttentionModel, text_loss


def _plain(h, w, target):
    logp = jax.nn.log_softmax(h @ w, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, target[:, None], axis=-1))


def _problem(n=37, m=5, d=11, seed=0):
    rng = np.random.default_rng(seed)
    h = jnp.asarray(rng.standard_normal((n, m)))
    w = jnp.asarray(rng.standard_normal((m, d)))
    target = jnp.asarray(rng.integers(0, d, n))
    return h, w, target


@pytest.mark.parametrize("rows", [8, 100])  # 37 rows: a short last block; one block
def test_value_gradient_and_hvp_match_the_plain_form(rows):
    h, w, target = _problem()

    def blocked(h, w):
        return head_cross_entropy(h, w, target, rows=rows)

    def plain(h, w):
        return _plain(h, w, target)

    v = (0.3 * h, -0.7 * w)

    def value_grad_hvp(f):  # the three, in one compiled program per form
        def all_three(h, w):
            hv = jax.jvp(jax.grad(f, (0, 1)), (h, w), v)[1]
            return f(h, w), jax.grad(f, (0, 1))(h, w), hv

        return jax.jit(all_three)(h, w)

    (l_b, g_b, hv_b), (l_p, g_p, hv_p) = map(value_grad_hvp, (blocked, plain))
    np.testing.assert_allclose(l_b, l_p, rtol=1e-14)
    for a, b in zip(g_b, g_p):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
    for a, b in zip(hv_b, hv_p):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-14)


def test_gradient_matches_central_differences():
    h, w, target = _problem(n=13, m=3, d=7, seed=1)
    rng = np.random.default_rng(2)
    dh, dw = rng.standard_normal(h.shape), rng.standard_normal(w.shape)
    eps = 1e-5

    @jax.jit
    def f(s):
        return head_cross_entropy(h + s * dh, w + s * dw, target, rows=4)

    fd = (f(eps) - f(-eps)) / (2 * eps)
    grad = jax.jit(
        jax.grad(lambda a, b: head_cross_entropy(a, b, target, rows=4), (0, 1))
    )
    g_h, g_w = grad(h, w)
    np.testing.assert_allclose(
        float(jnp.vdot(g_h, dh) + jnp.vdot(g_w, dw)), float(fd), rtol=1e-8
    )


def test_rows_below_one_is_refused():
    h, w, target = _problem()
    with pytest.raises(ValueError, match="rows must be >= 1"):
        head_cross_entropy(h, w, target, rows=0)


def test_sequence_loss_takes_the_blocked_form_at_text_vocabularies(monkeypatch):
    d = losses.BLOCKED_MIN_VOCAB
    model = AttentionModel.init(
        d_vocab=d, d_model=4, init_scale=0.5, key=jax.random.key(0), residual=True
    )
    tokens = np.random.default_rng(3).integers(0, d, (21, 6))
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def value_and_grad():
        return jax.jit(
            jax.value_and_grad(lambda p: sequence_loss(eqx.combine(p, static), tokens))
        )(params)

    calls = []

    def spy(*args, **kwargs):
        calls.append(1)
        return head_cross_entropy(*args, **kwargs)

    monkeypatch.setattr(losses, "head_cross_entropy", spy)
    blocked = value_and_grad()
    assert calls, "the blocked form was not taken at d = BLOCKED_MIN_VOCAB"
    monkeypatch.setattr(losses, "BLOCKED_MIN_VOCAB", d + 1)
    calls.clear()
    plain = value_and_grad()
    assert not calls
    np.testing.assert_allclose(blocked[0], plain[0], rtol=1e-14)
    for a, b in zip(jax.tree.leaves(blocked[1]), jax.tree.leaves(plain[1])):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-15)
    # the features are the logits before W_P (one compiled program for both)
    ctx = jnp.asarray(tokens[0, :-1])
    features, logits = eqx.filter_jit(lambda m, c: (m.features(c) @ m.W_P, m(c)))(
        model, ctx
    )
    np.testing.assert_allclose(features, logits, rtol=1e-14)


def test_text_loss_of_the_positional_model_takes_the_blocked_form():
    d = losses.BLOCKED_MIN_VOCAB
    model = PositionalAttentionModel.init(
        d_vocab=d, d_model=4, context_length=6, init_scale=0.5, key=jax.random.key(1)
    )
    tokens = jnp.asarray(np.random.default_rng(4).integers(0, d, (19, 7)))
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def blocked(p):
        return text_loss(eqx.combine(p, static), tokens)

    def plain(p):  # an independent recomputation from the model's logits
        logits = jax.vmap(eqx.combine(p, static))(tokens[:, :-1])
        return _plain_logits(logits, tokens[:, -1])

    # the blocked pass is a custom JVP; the plain form has none
    assert "custom_jvp_call" in str(jax.make_jaxpr(blocked)(params))
    assert "custom_jvp_call" not in str(jax.make_jaxpr(plain)(params))
    # value and gradient in one compiled program per form
    l_b, g_b = jax.jit(jax.value_and_grad(blocked))(params)
    l_p, g_p = jax.jit(jax.value_and_grad(plain))(params)
    np.testing.assert_allclose(l_b, l_p, rtol=1e-14)
    for a, b in zip(jax.tree.leaves(g_b), jax.tree.leaves(g_p)):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-15)
    ctx = tokens[0, :-1]
    features, logits = eqx.filter_jit(lambda m, c: (m.features(c) @ m.base.W_P, m(c)))(
        model, ctx
    )
    np.testing.assert_allclose(features, logits, rtol=1e-14)


def _plain_logits(logits, target):
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, target[:, None], axis=-1))
