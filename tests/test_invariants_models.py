"""The Transformer against a NumPy re-computation, in the default run (issue 58,
point 1: every model's oracle where a one-line bug breaks it).

tests/test_transformer.py holds the Transformer to the one-layer model, finite
differences and every option's effect, in CI's slow steps; tests/test_invariants.py
holds its causality. Neither sees a bug that keeps the model causal and every shape:
query and key swapped in the scores, a dropped 1/H, an MLP made residual, a skipped
LayerNorm, a temperature from the wrong width, every weight drawn from one key.
Here two small models (two layers of two heads; one with values, residual stream,
positions, MLPs and LayerNorms at 1/√k; one without values or residual stream, with
MLPs and LayerNorms), their LayerNorm gains and biases and MLP biases made random,
are computed a second time by a loop over layers, heads and positions written here
in NumPy from the equations, not from the library's code.
"""

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gflow.problems import Transformer

D_VOCAB, WIDTH, HEADS = 4, 8, 2  # as in tests/test_invariants.py
CONTEXT = np.array([2, 0, 3, 3, 1])


def _randomised(model, seed):
    """``model`` with every LayerNorm gain and bias and every MLP bias random (at
    init they are 1 and 0, which hides a LayerNorm or a bias read in the wrong
    place)."""
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        if jax.tree_util.keystr(path).endswith((".gain", ".bias", ".b_in", ".b_out")):
            return leaf + 0.3 * rng.normal(size=leaf.shape)
        return leaf

    return jax.tree_util.tree_map_with_path(draw, model)


MODELS = {
    "values-residual-positions": dict(
        n_layers=2,
        n_heads=HEADS,
        d_ff=16,
        value=True,
        layernorm=True,
        residual=True,
        max_len=5,
        tau="inv_sqrt_m",
    ),
    "no-values-no-residual": dict(
        n_layers=2, n_heads=HEADS, d_ff=16, layernorm=True, residual=False
    ),
}


@functools.cache
def _drawn(name):
    """``Transformer.init`` of model ``name`` (drawn once for the tests here)."""
    return Transformer.init(
        d_vocab=D_VOCAB,
        d_model=WIDTH,
        init_scale=0.5,
        key=jax.random.key(7),
        **MODELS[name],
    )


def _model(name):
    return _randomised(_drawn(name), 8)


def _layernorm(x, ln):
    if ln is None:
        return x
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + ln.eps) * np.asarray(ln.gain) + np.asarray(
        ln.bias
    )


def _gelu(x):  # jax.nn.gelu's default, the tanh approximation
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _reference(model, context):
    """(logits at every position [s, d], attention [l, h, s, s]) by hand."""
    p = jax.tree.map(np.asarray, model)
    s = len(context)
    x = p.W_E[context] + (0.0 if p.W_pos is None else p.W_pos[:s])
    attention = []
    for block in p.blocks:
        z = _layernorm(x, block.ln_attn)
        heads, y = [], np.zeros_like(x)
        for h in range(block.W_Q.shape[0]):
            a = np.zeros((s, s))
            for i in range(s):  # query i attends to keys j <= i
                scores = np.array(
                    [
                        model.tau * (z[i] @ block.W_Q[h]) @ (z[j] @ block.W_K[h])
                        for j in range(i + 1)
                    ]
                )
                e = np.exp(scores - scores.max())
                a[i, : i + 1] = e / e.sum()
            heads.append(a)
            if block.W_V is None:  # each head's weighted input, averaged
                y += a @ z / block.W_Q.shape[0]
            else:
                y += a @ (z @ block.W_V[h]) @ block.W_O[h]
        attention.append(heads)
        x = x + y if model.residual else y
        if block.mlp is not None:
            m = block.mlp
            f = _gelu(_layernorm(x, block.ln_mlp) @ m.W_in + m.b_in) @ m.W_out + m.b_out
            x = x + f if model.residual else f
    x = _layernorm(x, p.ln_final)
    return x @ p.W_P, np.array(attention)


@eqx.filter_jit
def _library(model, context):
    return model.causal_logits(context), model.attention(context), model(context)


@pytest.mark.parametrize("name", list(MODELS))
def test_the_transformer_is_its_equations(name):
    """Causal logits, attention weights and the last position's logits equal the
    NumPy loop's.

    Planted by hand, each caught: query and key indices swapped in the scores,
    the 1/H average of value-less heads dropped, the MLP residual without the
    residual stream, the pre-MLP LayerNorm skipped."""
    model = _model(name)
    logits, attention, last = _library(model, jnp.asarray(CONTEXT))
    ref_logits, ref_attention = _reference(model, CONTEXT)
    np.testing.assert_allclose(attention, ref_attention, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(logits, ref_logits, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(last, ref_logits[-1], rtol=1e-10, atol=1e-12)


def test_init_draws_every_weight_apart_and_tau_from_the_head_width():
    """``tau="inv_sqrt_m"`` is 1/√k with k = m/H the head width; no two weight
    matrices of one model are equal (each has its own key).

    Catches the temperature computed from the model width m, and every weight
    drawn from the same key (W_Q = W_K in every head of every layer)."""
    model = _drawn("values-residual-positions")
    assert model.tau == pytest.approx(1 / math.sqrt(WIDTH // HEADS), rel=1e-15)
    weights = [
        np.asarray(x).ravel()
        for x in jax.tree.leaves(model)
        if np.ndim(x) >= 2  # the matrices (LayerNorms start at 1 and 0)
    ]
    assert len(weights) == 3 + 2 * 6  # W_E, W_pos, W_P; per layer Q, K, V, O, in, out
    firsts = {float(w[0]) for w in weights}
    assert len(firsts) == len(weights)
