"""The preconditioned sharpness λ_max(D H) of Adam-like steps (issue 34 point 3):
Lanczos on D^{1/2} H D^{1/2} against the dense eigenvalues of D H, and Adam's D
read off an optax state against the step optax takes."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gflow import PopulationLoss
from gflow.analysis import adam_scale, dense_hessian, flatten, preconditioned_sharpness
from gflow.problems import AttentionModel, MarkovChain


@pytest.fixture(scope="module")
def problem():
    chain = MarkovChain.from_lambda(pi=np.array([0.5, 0.3, 0.2]), lam=0.5)
    model = AttentionModel.init(
        d_vocab=3, d_model=4, init_scale=0.5, key=jax.random.key(3)
    )
    return PopulationLoss(chain), model


def test_lanczos_on_the_scaled_hessian_is_the_dense_top_eigenvalue_of_dh(problem):
    loss, model = problem
    n = flatten(model)[0].size
    scale = jax.random.uniform(jax.random.key(1), (n,), minval=0.1, maxval=3.0)
    H = np.asarray(eqx.filter_jit(dense_hessian)(loss, model))
    dense = np.linalg.eigvals(np.asarray(scale)[:, None] * H).real.max()
    lam, v = preconditioned_sharpness(
        loss, model, scale, key=jax.random.key(0), iters=n
    )
    assert float(lam) == pytest.approx(dense, rel=1e-9)
    # v is the top eigenvector of S = D^½ H D^½
    root = np.sqrt(np.asarray(scale))
    S = root[:, None] * H * root[None, :]
    np.testing.assert_allclose(S @ np.asarray(v), float(lam) * np.asarray(v), atol=1e-8)
    # D = 1 is the plain sharpness, and a warm start from v is already converged
    plain = np.linalg.eigvalsh(H).max()
    lam1, _ = preconditioned_sharpness(
        loss, model, jnp.ones(n), key=jax.random.key(2), iters=n
    )
    assert float(lam1) == pytest.approx(plain, rel=1e-9)
    warm, _ = preconditioned_sharpness(loss, model, scale, v0=v, iters=3)
    assert float(warm) == pytest.approx(dense, rel=1e-7)
    with pytest.raises(ValueError, match="key or a start"):
        preconditioned_sharpness(loss, model, scale)


def test_adam_scale_is_the_factor_of_optaxs_adam_step(problem):
    loss, model = problem
    params, static = eqx.partition(model, eqx.is_inexact_array)
    grad = jax.grad(lambda p: loss(eqx.combine(p, static)))
    b1, b2, eps = 0.9, 0.99, 1e-6
    opt = optax.scale_by_adam(b1=b1, b2=b2, eps=eps)

    @jax.jit  # optax's update compiled once, not run op by op
    def update(params, state):
        return opt.update(grad(params), state)

    state = opt.init(params)
    for _ in range(3):
        u, state = update(params, state)
        params = eqx.apply_updates(params, jax.tree.map(lambda x: -0.01 * x, u))
    u, state = update(params, state)
    adam_state = state
    mu_hat = flatten(adam_state.mu)[0] / (1 - b1**4)
    D = jax.jit(adam_scale, static_argnames=("b2", "eps"))(
        adam_state.nu, adam_state.count, b2=b2, eps=eps
    )
    # optax's direction is m̂ / (√v̂ + ε) = D ⊙ m̂
    np.testing.assert_allclose(flatten(u)[0], D * mu_hat, rtol=1e-10)
    assert int(adam_state.count) == 4
