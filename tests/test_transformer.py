"""The multi-layer, multi-head Transformer: the one-layer model as a special case,
causality, attention shapes, every option, and the generic dynamics on it."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gflow import AttentionModel, MarkovChain
from gflow.problems import Transformer

CHAIN = MarkovChain.from_lambda(pi=(0.6, 0.25, 0.1, 0.05), lam=0.5)


def _tokens(seed=0, batch=8, length=7):
    return CHAIN.sample(key=jax.random.key(seed), batch=batch, length=length)


def _deep(key=1, **kw):
    opts = dict(d_ff=8, value=True, layernorm=True, residual=True, max_len=16)
    opts.update(kw)
    return Transformer.init(
        d_vocab=4,
        d_model=4,
        n_layers=2,
        n_heads=2,
        init_scale=0.5,
        key=jax.random.key(key),
        **opts,
    )


def _ce(logits, target):
    return -jnp.mean(
        jnp.take_along_axis(jax.nn.log_softmax(logits), target[:, None], axis=-1)
    )


@pytest.mark.parametrize(
    "opts", [{}, {"residual": True}, {"factorised": False}, {"tau": "inv_sqrt_m"}]
)
@pytest.mark.slow
def test_from_attention_model_is_the_same_function(opts):
    model = AttentionModel.init(
        d_vocab=4, d_model=3, init_scale=0.7, key=jax.random.key(2), **opts
    )
    deep = Transformer.from_attention_model(model)
    tokens = _tokens()
    context, target = tokens[:, :-1], tokens[:, -1]

    def loss(m):
        return _ce(jax.vmap(m)(context), target)

    np.testing.assert_allclose(loss(deep), loss(model), rtol=1e-12)
    g_deep, g_model = jax.grad(loss)(deep), jax.grad(loss)(model)
    np.testing.assert_allclose(g_deep.W_E, g_model.W_E, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(g_deep.W_P, g_model.W_P, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(
        g_deep.blocks[0].W_Q[0], g_model.W_Q, rtol=1e-10, atol=1e-14
    )
    if model.W_K is not None:
        np.testing.assert_allclose(
            g_deep.blocks[0].W_K[0], g_model.W_K, rtol=1e-10, atol=1e-14
        )


@pytest.mark.slow
def test_attention_is_causal_and_rows_sum_to_one():
    model = _deep()
    context = _tokens(batch=1)[0, :-1]
    attn = model.attention(context)
    s = context.shape[0]
    assert attn.shape == (2, 2, s, s)
    np.testing.assert_allclose(attn.sum(-1), 1.0, rtol=1e-12)
    assert np.all(
        np.asarray(attn)[..., np.triu_indices(s, 1)[0], np.triu_indices(s, 1)[1]] == 0
    )
    # causality: the logits at position i do not depend on tokens after i
    other = context.at[-1].set((context[-1] + 1) % 4)
    np.testing.assert_allclose(
        model.causal_logits(context)[:-1], model.causal_logits(other)[:-1], rtol=1e-12
    )
    np.testing.assert_allclose(model(context), model.causal_logits(context)[-1])


@pytest.mark.slow  # 4.9 s, not an oracle; .ci/run runs it
def test_every_option_is_present_and_moves_the_output():
    """In the default suite (1 s): the Transformer's oracle of its parts; each
    attention row is a distribution over the keys up to its query."""
    base = _deep()
    block = base.blocks[0]
    assert block.W_V.shape == (2, 4, 2) and block.W_O.shape == (2, 2, 4)
    assert block.mlp.W_in.shape == (4, 8) and block.mlp.W_out.shape == (8, 4)
    assert base.W_pos.shape == (16, 4) and base.residual
    assert base.ln_final is not None and block.ln_attn is not None
    np.testing.assert_array_equal(block.ln_attn.gain, 1.0)  # LayerNorm starts at 1
    context = _tokens(batch=1)[0, :-1]
    attn = np.asarray(base.attention(context))
    s = context.shape[0]
    np.testing.assert_allclose(attn.sum(-1), 1.0, rtol=1e-12)
    assert np.all(attn[..., np.triu_indices(s, 1)[0], np.triu_indices(s, 1)[1]] == 0)
    out = base(context)
    for opts in (
        {"d_ff": None},
        {"value": False},
        {"layernorm": False},
        {"residual": False},
        {"max_len": None},
    ):
        assert not np.allclose(_deep(**opts)(context), out), opts
    # positions matter only with max_len: permuting the tokens before the last one
    # changes the output with learned positions and leaves it without
    context = jnp.array([0, 1, 2, 3, 1, 0])
    perm = jnp.array([3, 2, 1, 0, 1, 0])
    assert not np.allclose(base(perm), base(context))
    flat = Transformer.init(
        d_vocab=4,
        d_model=4,
        n_heads=2,
        init_scale=0.5,
        key=jax.random.key(1),
        d_ff=8,
        value=True,
        layernorm=True,
        residual=True,
    )
    np.testing.assert_allclose(flat(perm), flat(context), rtol=1e-12)
    with pytest.raises(ValueError, match="longer than max_len"):
        base(jnp.zeros(17, int))


def test_layernorm_normalises_and_bad_settings_are_refused():
    from gflow.problems import LayerNorm

    ln = LayerNorm(jnp.ones(5), jnp.zeros(5))
    y = ln(jnp.arange(10.0).reshape(2, 5))
    np.testing.assert_allclose(y.mean(-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(y.var(-1), 1.0, rtol=1e-4)
    for bad, match in [
        (dict(d_model=5, n_heads=2), "multiple of n_heads"),
        (dict(n_layers=0), "n_layers"),
        (dict(d_vocab=1), "d_vocab"),
        (dict(d_ff=0), "d_ff"),
        (dict(init_scale=0.0), "init_scale"),
    ]:
        kw = dict(d_vocab=4, d_model=4, key=jax.random.key(0)) | bad
        with pytest.raises(ValueError, match=match):
            Transformer.init(**kw)


@pytest.mark.slow
def test_gradient_matches_finite_differences():
    model = _deep()
    tokens = _tokens()

    def loss(m):
        return _ce(jax.vmap(m)(tokens[:, :-1]), tokens[:, -1])

    grads = jax.grad(loss)(model)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    leaves, treedef = jax.tree.flatten(params)
    gleaves = jax.tree.leaves(eqx.filter(grads, eqx.is_inexact_array))
    rng = np.random.default_rng(0)
    for i in rng.choice(len(leaves), 5, replace=False):
        idx = tuple(rng.integers(0, n) for n in leaves[i].shape)
        h = 1e-6

        def at(delta, i=i, idx=idx):
            new = list(leaves)
            new[i] = leaves[i].at[idx].add(delta)
            return loss(eqx.combine(jax.tree.unflatten(treedef, new), static))

        fd = (at(h) - at(-h)) / (2 * h)
        np.testing.assert_allclose(gleaves[i][idx], fd, rtol=1e-6, atol=1e-9)


@pytest.mark.slow
def test_attention_entropy_is_per_layer_and_head():
    """gflow.attention_entropy of a Transformer: [L, H], the last row's entropy,
    equal to the head observables' and, for the one-layer model, to a NumPy sum."""
    from gflow import HeadObservables, attention_entropy

    model = _deep()
    tokens = _tokens(batch=4)
    ent = attention_entropy(model, tokens)
    assert ent.shape == (2, 2)
    obs = HeadObservables.default(tokens, 4)(model)
    np.testing.assert_allclose(ent, obs["head_entropy"], rtol=1e-12)
    attn = np.asarray(jax.vmap(model.attention)(tokens[:, :-1]))[..., -1, :]
    want = -np.sum(np.where(attn > 0, attn * np.log(attn), 0.0), axis=-1).mean(0)
    np.testing.assert_allclose(ent, want, rtol=1e-10)
