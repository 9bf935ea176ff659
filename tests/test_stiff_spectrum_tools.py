"""The stiff-spectrum experiment's measure of LayerNorm's collapse: the smallest
LayerNorm input σ against a numpy recomputation."""

import jax
import jax.numpy as jnp
import numpy as np

from experiments.stiff_spectrum import ln_input_sigma
from gflow import Transformer


def _tiny(layernorm=True):
    return Transformer.init(
        d_vocab=3,
        d_model=4,
        n_layers=2,
        key=jax.random.key(0),
        init_scale=0.5,
        layernorm=layernorm,
        residual=True,
        max_len=8,
        dtype=jnp.float64,
    )


def test_ln_input_sigma_is_the_smallest_std_of_any_layernorm_input():
    model = _tiny()
    tokens = np.array([[0, 1, 2, 1, 0, 2], [2, 2, 1, 0, 0, 1]])
    want = np.inf
    for context in tokens[:, :-1]:  # recompute block by block, by hand
        x = np.asarray(model.W_E)[context] + np.asarray(model.W_pos)[: len(context)]
        for block in model.blocks:
            want = min(want, np.std(x, axis=-1).min())
            x = np.asarray(block(jnp.asarray(x), model.tau, model.residual)[0])
        want = min(want, np.std(x[-1]))
    assert np.isclose(ln_input_sigma(model, tokens), want, rtol=1e-9)
    # without LayerNorm there is nothing to divide by
    assert ln_input_sigma(_tiny(layernorm=False), tokens) == np.inf
