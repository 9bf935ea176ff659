import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gflow import AttentionModel


def test_init_shapes_and_scale(key):
    m = AttentionModel.init(d_vocab=5, d_model=64, init_scale=0.1, key=key)
    assert m.W_E.shape == (5, 64) and m.W_P.shape == (64, 5)
    assert m.W_Q.shape == (64, 64) and m.W_K.shape == (64, 64)
    # 4096 draws: the sample std is within a few percent of 0.1
    assert abs(float(jnp.std(m.W_Q)) - 0.1) < 0.005
    assert abs(float(jnp.mean(m.W_Q))) < 0.005


def test_same_key_same_bits(key):
    a = AttentionModel.init(d_vocab=4, d_model=8, key=key)
    b = AttentionModel.init(d_vocab=4, d_model=8, key=key)
    assert all(
        np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))
    )


@pytest.mark.parametrize(
    "dtype", [None, pytest.param(jnp.float32, marks=pytest.mark.slow)]
)
def test_init_draws_the_bits_of_op_by_op_draws(dtype):
    # one jitted program draws what split + normal + scale gave eagerly, to the bit
    # (runs, checkpoints and published figures were made with the eager draws)
    key = jax.random.key(5)
    kE, kQ, kK, kP = jax.random.split(key, 4)
    shapes = [(kE, (3, 7)), (kQ, (7, 7)), (kK, (7, 7)), (kP, (7, 3))]
    want = [0.37 * jax.random.normal(k, s, dtype=dtype) for k, s in shapes]
    for factorised in (True, False):
        m = AttentionModel.init(
            d_vocab=3,
            d_model=7,
            init_scale=0.37,
            key=key,
            dtype=dtype,
            factorised=factorised,
        )
        got = [m.W_E, m.W_Q, m.W_K, m.W_P]
        for w, g in zip(want, got):
            if g is None:
                assert not factorised
                continue
            assert g.dtype == w.dtype and np.array_equal(np.asarray(g), np.asarray(w))


def test_keyword_constructor_and_shape_checks(unchecked):
    z = jnp.zeros
    AttentionModel(W_E=z((3, 2)), W_Q=z((2, 2)), W_K=z((2, 2)), W_P=z((2, 3)))
    with pytest.raises(ValueError, match="W_P"):
        AttentionModel(W_E=z((3, 2)), W_Q=z((2, 2)), W_K=z((2, 2)), W_P=z((3, 2)))
    with pytest.raises(ValueError, match="W_Q"):
        AttentionModel(W_E=z((3, 2)), W_Q=z((3, 3)), W_K=z((2, 2)), W_P=z((2, 3)))


def test_bad_init_arguments(key):
    with pytest.raises(ValueError, match="init_scale"):
        AttentionModel.init(d_vocab=4, d_model=8, init_scale=0.0, key=key)
    with pytest.raises(ValueError, match="d_vocab"):
        AttentionModel.init(d_vocab=1, d_model=8, key=key)


def test_forward_matches_hand_computation(key):
    m = AttentionModel.init(d_vocab=4, d_model=3, init_scale=0.7, key=key, tau=0.5)
    ctx = jnp.array([0, 2, 2, 1, 3])
    E = np.asarray(m.W_E)[np.asarray(ctx)]
    WA = np.asarray(m.W_Q) @ np.asarray(m.W_K).T
    z = 0.5 * E[-1] @ WA @ E.T
    a = np.exp(z - z.max())
    a /= a.sum()
    expected = (a @ E) @ np.asarray(m.W_P)
    np.testing.assert_allclose(m(ctx), expected, rtol=1e-12)


def test_tau_inv_sqrt_m_and_unfactorised(key):
    m = AttentionModel.init(
        d_vocab=4, d_model=16, key=key, tau="inv_sqrt_m", factorised=False
    )
    assert m.tau == pytest.approx(0.25)
    assert m.W_K is None
    np.testing.assert_array_equal(m.W_A, m.W_Q)
    n_leaves = len(jax.tree.leaves(eqx.filter(m, eqx.is_inexact_array)))
    assert n_leaves == 3


def test_residual_adds_query_embedding(key):
    m = AttentionModel.init(d_vocab=4, d_model=3, init_scale=0.5, key=key)
    r = AttentionModel(W_E=m.W_E, W_Q=m.W_Q, W_K=m.W_K, W_P=m.W_P, residual=True)
    ctx = jnp.array([1, 3, 0])
    np.testing.assert_allclose(r(ctx) - m(ctx), m.W_E[0] @ m.W_P, rtol=1e-10)


def test_dense_forms(key):
    m = AttentionModel.init(d_vocab=4, d_model=3, init_scale=0.5, key=key)
    np.testing.assert_allclose(m.M, m.W_E @ m.W_P)
    np.testing.assert_allclose(m.Phi, m.W_E @ m.W_Q @ m.W_K.T @ m.W_E.T)
