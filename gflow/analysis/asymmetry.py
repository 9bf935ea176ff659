"""The rank-one invariant manifold and the asymmetry-lifting saddle (MODEL.md §6, 4).

For a unit vector r of R^m the linear subspace

    S_r = { W_E = a rᵀ, W_Q = α r rᵀ, W_K = β r rᵀ, W_P = r bᵀ :  a, b ∈ R^d; α, β ∈ R }

is invariant under the gradient flow: Φ = αβ a aᵀ and M = a bᵀ, and each block's
gradient (∂L/∂M W_Pᵀ + ∂L/∂Φ W_E W_Aᵀ + ..., W_Eᵀ ∂L/∂Φ W_E W_K, W_Eᵀ ∂L/∂M) keeps
r as its only row/column direction. The map (a, α, β, b) → θ is an isometry, so
the flow on S_r is the gradient flow of the same loss for width m = 1: the reduced
ODE of the manifold is the flow of a d_model = 1 AttentionModel (``rank_one_part``
and ``embed_rank_one`` go between the two).

Because S_r is a linear invariant subspace, the Hessian at any critical point in it
maps S_r and its orthogonal complement into themselves: its spectrum splits exactly
into a *tangential* part (the m = 1 Hessian) and a *transverse* part (directions
that give a block a second singular value). ``split_hessian`` returns both. With
π = (p₀, q + δ, q, q − δ) the flow on S_r stalls at a critical point after focus
and dilution (``rank_one_critical_point``). At δ = 0 its whole transverse part is
zero; δ > 0 turns one pair of those zeros into ±λ₁ with λ₁ = Θ(δ) (0.067 δ for
p₀ = 0.7, q = 0.1, λ = 0.5; docs/markov_saddle.md), the escape along the asymmetric
direction that opens σ₂(W_E), and another pair into ±Θ(δ³).
"""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Float

from gflow.analysis.critical import newton_critical_point
from gflow.analysis.hessian import dense_hessian, flatten
from gflow.analysis.saddle import unigram_saddle
from gflow.array_types import LossFn
from gflow.dynamics.flow import solve_flow
from gflow.problems.losses import PopulationLoss
from gflow.problems.markov import MarkovChain
from gflow.problems.model import AttentionModel

BLOCKS = ("W_E", "W_Q", "W_K", "W_P")


def symmetric_chain(
    delta: float, *, base: tuple[float, ...] = (0.7, 0.1, 0.1, 0.1), lam: float = 0.5
) -> MarkovChain:
    """The chain P = λI + (1−λ)1πᵀ with π = (p₀, q + δ, q, q − δ) from ``base``."""
    p = np.asarray(base, float).copy()
    if not np.allclose(p[1:], p[1]):
        raise ValueError(f"base must repeat one low frequency after p₀, got {base}")
    if not 0 <= delta < p[1]:
        raise ValueError(f"delta must lie in [0, {p[1]}), got {delta}")
    p[1] += delta
    p[-1] -= delta
    return MarkovChain.from_lambda(pi=p, lam=lam)


def _unit(direction, m):
    r = np.zeros(m) if direction is None else np.asarray(direction, float)
    if direction is None:
        r[0] = 1.0
    if r.shape != (m,) or not np.isclose(np.linalg.norm(r), 1.0):
        raise ValueError(f"direction must be a unit vector of shape ({m},)")
    return r


def embed_rank_one(
    small: AttentionModel,
    *,
    d_model: int,
    direction: Float[np.ndarray, " m"] | None = None,
) -> AttentionModel:
    """The point of S_r with the coordinates of a width-1 model (r = e₁ by default)."""
    if small.d_model != 1 or small.W_K is None:
        raise ValueError("embed_rank_one needs a factorised AttentionModel of width 1")
    r = jnp.asarray(_unit(direction, d_model), small.W_E.dtype)
    rr = jnp.outer(r, r)
    return AttentionModel(
        W_E=jnp.asarray(small.W_E) * r[None, :],  # a rᵀ
        W_Q=small.W_Q[0, 0] * rr,
        W_K=small.W_K[0, 0] * rr,
        W_P=r[:, None] * jnp.asarray(small.W_P),  # r bᵀ
        tau=small.tau,
        residual=small.residual,
    )


def rank_one_part(
    model: AttentionModel, *, direction: Float[np.ndarray, " m"] | None = None
) -> AttentionModel:
    """The width-1 coordinates of the orthogonal projection of ``model`` onto S_r."""
    r = jnp.asarray(_unit(direction, model.d_model), model.W_E.dtype)
    return AttentionModel(
        W_E=(jnp.asarray(model.W_E) @ r)[:, None],
        W_Q=(r @ model.W_Q @ r)[None, None],
        W_K=(r @ model.W_K @ r)[None, None],
        W_P=(r @ jnp.asarray(model.W_P))[None, :],
        tau=model.tau,
        residual=model.residual,
    )


def block_singular_values(model: AttentionModel) -> dict[str, np.ndarray]:
    """Singular values (decreasing) of W_E, W_Q, W_K, W_P and W_A = W_Q W_Kᵀ."""
    out = {
        n: np.linalg.svd(np.asarray(getattr(model, n)), compute_uv=False)
        for n in BLOCKS
    }
    out["W_A"] = np.linalg.svd(np.asarray(model.W_A), compute_uv=False)
    return out


def tangent_basis(
    model: AttentionModel, *, direction: Float[np.ndarray, " m"] | None = None
) -> Float[np.ndarray, "n k"]:
    """An orthonormal basis [n, 2d + 2] of S_r in the model's flat parameter vector."""
    d = model.d_vocab
    small = AttentionModel(
        W_E=jnp.zeros((d, 1)),
        W_Q=jnp.zeros((1, 1)),
        W_K=jnp.zeros((1, 1)),
        W_P=jnp.zeros((1, d)),
        tau=model.tau,
    )
    x0, unravel = flatten(small)

    def embed(y):
        return flatten(
            embed_rank_one(unravel(y), d_model=model.d_model, direction=direction)
        )[0]

    # embed is linear and isometric: its Jacobian's columns are orthonormal
    return np.asarray(jax.jacfwd(embed)(x0))


def split_hessian(
    loss_fn: LossFn,
    model: AttentionModel,
    *,
    direction: Float[np.ndarray, " m"] | None = None,
) -> dict[str, np.ndarray]:
    """The Hessian at a point of S_r, split into its tangential and transverse parts.

    Returns:
        ``tangential``: eigenvalues [2d + 2] of H on S_r; ``transverse``: eigenvalues
        [n − 2d − 2] on its complement, with ``transverse_vectors`` [n, n − 2d − 2]
        (flat parameter space); ``leak``: |P_⊥ H P_S|, zero when S_r is invariant.
    """
    H = np.asarray(dense_hessian(loss_fn, model))
    T = tangent_basis(model, direction=direction)
    # the complement: eigenvectors of the projector I − T Tᵀ with eigenvalue 1
    w, U = np.linalg.eigh(np.eye(H.shape[0]) - T @ T.T)
    N = U[:, w > 0.5]
    lam_t = np.linalg.eigvalsh(T.T @ H @ T)
    lam_n, V = np.linalg.eigh(N.T @ H @ N)
    return {
        "tangential": lam_t,
        "transverse": lam_n,
        "transverse_vectors": N @ V,
        "leak": np.array(np.linalg.norm(N.T @ H @ T, 2)),
    }


def rank_one_critical_point(
    chain: MarkovChain,
    *,
    t1: float = 3000.0,
    init: AttentionModel | None = None,
    newton_iters: int = 30,
    solver: diffrax.AbstractSolver | None = None,
) -> tuple[AttentionModel, list[float]]:
    """The critical point where the rank-one (width-1) flow stalls after cycle 1.

    Integrates the width-1 flow (the reduced ODE of S_r) to ``t1`` from ``init``
    (default: the balanced unigram saddle with α = β = 1e-3) and polishes the end
    state with Newton's method (``newton_critical_point``). ``solver`` is passed to
    ``solve_flow`` (None: its default).

    Returns:
        (width-1 model at the critical point, |∇L| before each Newton step).
    """
    if init is None:
        init = unigram_saddle(chain, d_model=1)
        small = jnp.full((1, 1), 1e-3, init.W_E.dtype)
        init = AttentionModel(W_E=init.W_E, W_Q=small, W_K=small, W_P=init.W_P)
    loss = PopulationLoss(chain)
    traj = solve_flow(
        loss, init, t1=t1, ts=np.array([t1]), solver=solver, progress=False
    )
    return newton_critical_point(loss, traj.final, iters=newton_iters, tol=1e-12)
