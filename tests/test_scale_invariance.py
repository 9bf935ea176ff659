"""Oracle tests of scale invariance past LayerNorm (issue 57): on models whose loss
is exactly scale-invariant in one block (every LayerNorm with eps = 0 reading it),
the loss does not change when the block is scaled, the gradient is orthogonal to
the block, the gradient flow keeps its norm to the solver's tolerance, and each
GD step adds exactly eta^2 |g|^2 to its norm squared."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gflow import MarkovChain, SequenceLoss, Transformer, solve_flow
from gflow.analysis import (
    layernorm_eps_zero,
    scale_invariant_mask,
    scale_invariant_norm,
)


def _tokens():
    return np.asarray(
        MarkovChain.default().sample(key=jax.random.key(0), batch=8, length=8)
    )


def _models():
    key = jax.random.key(1)
    common = dict(d_vocab=4, d_model=4, n_heads=2, layernorm=True, key=key)
    # the ladder's rung 7 in small (residual, value, MLP, positions), and the
    # non-residual pre-LN block (invariant in the embeddings alone)
    yield (
        "residual",
        Transformer.init(
            **common,
            n_layers=1,
            residual=True,
            value=True,
            d_ff=6,
            max_len=7,
            init_scale=0.3,
        ),
    )
    yield "plain", Transformer.init(**common, n_layers=1, init_scale=0.3)


def _split(model, mask):
    block = eqx.filter(model, mask)
    rest = eqx.filter(model, jax.tree_util.tree_map(lambda m: not m, mask))
    return block, rest


def _sq(tree):
    return sum(jnp.sum(jnp.square(x)) for x in jax.tree_util.tree_leaves(tree))


@pytest.mark.parametrize("name,model", list(_models()))
def test_loss_is_invariant_and_gradient_orthogonal(name, model):
    model = layernorm_eps_zero(model)
    loss = SequenceLoss(_tokens())
    mask = scale_invariant_mask(model)
    block, rest = _split(model, mask)
    scaled = eqx.combine(jax.tree_util.tree_map(lambda x: 3.0 * x, block), rest)
    value = eqx.filter_jit(loss)
    l0, l3 = float(value(model)), float(value(scaled))
    assert abs(l3 - l0) < 1e-12 * abs(l0)
    g = eqx.filter_jit(eqx.filter_grad(loss))(model)
    g_block, g_rest = _split(g, mask)
    inner = sum(
        jnp.vdot(a, b)
        for a, b in zip(
            jax.tree_util.tree_leaves(g_block), jax.tree_util.tree_leaves(block)
        )
    )
    scale = float(jnp.sqrt(_sq(g_block) * _sq(block)))
    assert scale > 1e-6  # the block does get a gradient
    assert abs(float(inner)) < 1e-12 * scale
    # the control: with the library's eps = 1e-5 and the block scaled down until
    # the LayerNorm inputs' spread is near sqrt(eps), the invariance breaks
    small = eqx.combine(jax.tree_util.tree_map(lambda x: 1e-3 * x, block), rest)
    with_eps = eqx.tree_at(
        lambda m: m.ln_final,
        small,
        type(small.ln_final)(small.ln_final.gain, small.ln_final.bias, eps=1e-5),
    )
    assert abs(float(value(with_eps)) - float(value(small))) > 1e-6


def test_flow_keeps_the_norm_and_gd_adds_eta_squared_grad_squared():
    name, model = list(_models())[1]  # the plain block: the cheapest to compile
    model = layernorm_eps_zero(model)
    loss = SequenceLoss(_tokens())
    n0 = float(scale_invariant_norm(model))
    tr = solve_flow(
        loss,
        model,
        t1=0.1,
        ts=[0.0, 0.1],
        solver=diffrax.Tsit5(),
        rtol=1e-9,
        atol=1e-11,
        save_params=True,
        progress=False,
    )
    moved = float(
        jnp.sqrt(
            _sq(
                jax.tree_util.tree_map(
                    lambda a, b: a - b,
                    eqx.filter(tr.final, eqx.is_inexact_array),
                    eqx.filter(model, eqx.is_inexact_array),
                )
            )
        )
    )
    assert moved > 1e-2  # the flow went somewhere
    assert float(tr.metrics["loss"][-1]) < float(tr.metrics["loss"][0]) - 1e-3
    assert abs(float(scale_invariant_norm(tr.final)) - n0) < 1e-7 * n0
    # GD: |theta_S - eta g|^2 = |theta_S|^2 + eta^2 |g|^2, step by step
    eta, grads = 0.5, 0.0
    mask = scale_invariant_mask(model)
    grad = eqx.filter_jit(eqx.filter_grad(loss))
    params = model
    for _ in range(5):
        g = grad(params)
        grads += float(_sq(_split(g, mask)[0]))
        params = eqx.apply_updates(
            params, jax.tree_util.tree_map(lambda x: -eta * x, g)
        )
    n5 = float(scale_invariant_norm(params)) ** 2
    assert n5 - n0**2 > 1e-3 * n0**2  # the norm grows ...
    assert abs(n5 - (n0**2 + eta**2 * grads)) < 1e-10 * n5  # ... by exactly this


def test_models_without_an_invariant_block_are_refused():
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="no LayerNorm"):
        scale_invariant_mask(Transformer.init(d_vocab=4, d_model=4, key=key))
    with pytest.raises(ValueError, match="without value"):
        scale_invariant_mask(
            Transformer.init(
                d_vocab=4, d_model=4, key=key, n_layers=2, residual=True, layernorm=True
            )
        )


def test_layernorm_sigmas_are_the_spreads_each_layernorm_reads():
    """An independent recomputation: every LayerNorm of the model replaced by one
    that records the spread of its input (run eagerly, so the recording is a
    Python side effect), the model run on each context; per LayerNorm the
    smallest recorded spread over contexts and positions (the final LayerNorm's
    at the last position only) is the function's entry, and
    ``smallest_layernorm_sigma`` their minimum.

    Catches a LayerNorm left out or read on the wrong stream (the MLP's reads the
    stream after attention), the final LayerNorm read at every position, and the
    spread taken over the wrong axis."""
    from gflow.analysis import layernorm_sigmas, smallest_layernorm_sigma
    from gflow.problems import LayerNorm

    seen = []

    class Recording(LayerNorm):
        def __call__(self, x):
            seen.append(np.sqrt(np.var(np.asarray(x), axis=-1)))
            return super().__call__(x)

    model = next(m for name, m in _models() if name == "residual")
    model = eqx.tree_at(lambda m: m.W_E, model, model.W_E * 1e-2)  # small spreads
    lns = lambda m: (
        [  # noqa: E731
            ln for b in m.blocks for ln in (b.ln_attn, b.ln_mlp) if ln is not None
        ]
        + [m.ln_final]
    )
    recording = eqx.tree_at(
        lns, model, [Recording(ln.gain, ln.bias, eps=ln.eps) for ln in lns(model)]
    )
    contexts = _tokens()[:, :-1]
    want = np.full(3, np.inf)
    for context in contexts:
        seen.clear()
        recording._stream(jnp.asarray(context))
        # the attention's LayerNorm is read twice (weights, values), the MLP's
        # once, the final one once
        attn, attn_again, mlp, final = seen
        np.testing.assert_array_equal(attn, attn_again)
        now = [np.min(attn), np.min(mlp), final[-1]]
        want = np.minimum(want, now)
    got = np.asarray(layernorm_sigmas(model, contexts))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert float(smallest_layernorm_sigma(model, contexts)) == pytest.approx(
        want.min(), rel=1e-6
    )
    plain = Transformer.init(d_vocab=4, d_model=4, n_heads=2, key=jax.random.key(1))
    assert layernorm_sigmas(plain, contexts).shape == (0,)
    assert float(smallest_layernorm_sigma(plain, contexts)) == np.inf
