import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from gflow import AttentionModel, MarkovChain, PopulationLoss
from gflow.analysis import dense_hessian, extreme_eigenpairs, flatten, hvp, lanczos

#: the dense Hessian, compiled once (both tests take it at the same model)
_dense_hessian = eqx.filter_jit(dense_hessian)


def _setup():
    chain = MarkovChain.from_lambda(pi=(0.6, 0.3, 0.1), lam=0.5)
    model = AttentionModel.init(
        d_vocab=3, d_model=3, init_scale=0.5, key=jax.random.key(2)
    )
    return PopulationLoss(chain), model


def test_lanczos_matches_dense_eigensolver():
    loss, model = _setup()
    H = np.asarray(_dense_hessian(loss, model))
    n = H.shape[0]
    assert n == 3 * 3 + 3 * 3 * 2 + 3 * 3
    exact = np.linalg.eigvalsh(H)
    evals, evecs = extreme_eigenpairs(loss, model, key=jax.random.key(0), iters=n)
    np.testing.assert_allclose(np.asarray(evals), exact, atol=1e-9)
    # the top Ritz vector is an eigenvector
    v = np.asarray(evecs[:, -1])
    np.testing.assert_allclose(H @ v, exact[-1] * v, atol=1e-8)


def test_hvp_matches_dense_hessian():
    loss, model = _setup()
    H = np.asarray(_dense_hessian(loss, model))
    v = np.random.default_rng(0).normal(size=H.shape[0])
    Hv = eqx.filter_jit(hvp)(loss, model, jnp.asarray(v))
    np.testing.assert_allclose(Hv, H @ v, rtol=1e-10)


def test_lanczos_on_a_known_spectrum():
    rng = np.random.default_rng(1)
    Q, _ = np.linalg.qr(rng.normal(size=(50, 50)))
    lam = np.linspace(-1.0, 10.0, 50)
    A = jnp.asarray(Q @ np.diag(lam) @ Q.T)
    # compiled once, not run op by op
    evals, _ = jax.jit(lambda v0: lanczos(lambda v: A @ v, v0, 30))(jnp.ones(50))
    assert abs(float(evals[-1]) - 10.0) < 1e-8
    assert abs(float(evals[0]) + 1.0) < 1e-6


def test_flatten_round_trip():
    _, model = _setup()
    x, unravel = flatten(model)
    back = unravel(x)
    assert back.tau == model.tau
    np.testing.assert_array_equal(back.W_K, model.W_K)
