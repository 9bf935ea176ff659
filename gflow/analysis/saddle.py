"""The balanced unigram saddle: the critical point behind the first plateau.

With W_Q = W_K = 0 every query attends with the key frequencies π (a_ik = π_k), so the
logits are the same for every query, v = πᵀM with M = W_E W_P, and the population loss
is the cross-entropy of softmax(v) against the marginal of the next token, which is π
for any chain. Its minimum H(π) is reached when v = log π up to a constant. The
gradient of the loss in M is then zero, and so is its gradient in (W_Q, W_K) (each
is the other factor times ∂L/∂W_A). Among the many such points, gradient flow from a
small start picks one: ∂L/∂M = π gᵀ with Σ_j g_j = 0 while attention is uniform, so
W_E moves only along π and the columns of W_P keep summing to zero, and
W_EᵀW_E − W_P W_Pᵀ is conserved (≈ 0). Hence the *balanced unigram saddle*

    W_E = a rᵀ,  W_P = r bᵀ,  a = s π/|π|,  b = ℓ/(s|π|),  s² = |ℓ|/|π|,
    ℓ = log π − mean(log π),  W_Q = W_K = 0,

r a unit vector of R^m (e₁ here, so the point is deterministic; the loss does not
depend on it). Its Hessian splits into two blocks with no coupling: (W_E, W_P), which
is positive semi-definite because L is convex in v and ∇_v L = 0, and (W_Q, W_K),
whose quadratic form is 2⟨∂L/∂W_A, q kᵀ⟩ = 2γ (qᵀr)·(kᵀr) with

    γ = aᵀ (∂L/∂Φ) a = τ · Cov_π(a_i, (π − P_i)·b) · Var_π(a),

(∂L/∂Φ)_il = τ π_i π_l (π − P_i)·(M_l − v). So the attention block has m eigenvalues
+c, m eigenvalues −c (c = |γ|) and 2m² − 2m zeros: near the saddle W_Q and W_K grow
like ε e^{ct}, Φ like ε² e^{2ct}, and the plateau lasts about ln(1/ε)/c.

``unigram_saddle`` builds the point, ``saddle_rate`` gives c from the formula,
``block_spectra`` the Hessian's block spectra (dense), ``restricted_newton`` finds a
unigram critical point from any start, and ``structure`` gives the stage-wise
structural measurements (alignment with π, rank of each block, W_QK alignment).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike
from jaxtyping import Float

from gflow.analysis.critical import block_slices
from gflow.analysis.hessian import dense_hessian
from gflow.array_types import LossFn
from gflow.problems.markov import MarkovChain
from gflow.problems.model import AttentionModel

#: The parameter groups whose Hessian blocks ``block_spectra`` separates.
BLOCK_GROUPS = {"embedding": ("W_E", "W_P"), "attention": ("W_Q", "W_K")}


def _saddle_vectors(pi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a [d], b [d]) of the balanced unigram saddle: W_E = a rᵀ, W_P = r bᵀ."""
    if np.any(pi <= 0):
        raise ValueError(
            "the unigram saddle needs π > 0 everywhere (log π); drop the tokens "
            "with zero stationary probability"
        )
    ell = np.log(pi) - np.mean(np.log(pi))
    npi, nell = np.linalg.norm(pi), np.linalg.norm(ell)
    if nell < 1e-10:
        raise ValueError(
            "π is uniform: the unigram optimum is M = 0, i.e. θ = 0, and there is "
            "no rank-one saddle (condensation does not happen)"
        )
    s = np.sqrt(nell / npi)
    return s * pi / npi, ell / (s * npi)


def unigram_saddle(
    chain: MarkovChain,
    *,
    d_model: int,
    tau: float = 1.0,
    direction: Float[np.ndarray, " m"] | None = None,
    dtype: DTypeLike | None = None,
) -> AttentionModel:
    """The balanced unigram critical point (closed form; module docstring).

    Args:
        chain: the Markov chain; only its stationary π sets the point (every entry
            must be positive).
        d_model: width m.
        tau: softmax scale of the attention scores.
        direction: the unit vector r [m] shared by W_E's rows and W_P's columns
            (default e₁, so the point is deterministic).
        dtype: float dtype (default: JAX's default float; use float64 for Hessians).

    Returns:
        A factorised AttentionModel with W_Q = W_K = 0, W_E = a rᵀ and W_P = r bᵀ.
    """
    if d_model < 1:
        raise ValueError(f"d_model must be at least 1, got {d_model}")
    r = np.zeros(d_model) if direction is None else np.asarray(direction, float)
    if direction is None:
        r[0] = 1.0
    if r.shape != (d_model,) or not np.isclose(np.linalg.norm(r), 1.0):
        raise ValueError(f"direction must be a unit vector of shape ({d_model},)")
    a, b = _saddle_vectors(np.asarray(chain.pi, float))
    dtype = dtype or jnp.zeros(()).dtype
    zero = jnp.zeros((d_model, d_model), dtype)
    return AttentionModel(
        W_E=jnp.asarray(np.outer(a, r), dtype),
        W_Q=zero,
        W_K=zero,
        W_P=jnp.asarray(np.outer(r, b), dtype),
        tau=float(tau),
    )


def saddle_rate(chain: MarkovChain, *, tau: float = 1.0) -> float:
    """c = |γ|: the rate of the attention block's ±c pair at the unigram saddle.

    γ = τ Cov_π(a_i, (π − P_i)·b) · Var_π(a) with the saddle's a, b (module
    docstring); computed here from the formula, not from a Hessian.
    """
    pi = np.asarray(chain.pi, float)
    P = np.asarray(chain.P, float)
    a, b = _saddle_vectors(pi)
    abar = pi @ a
    cov = np.sum(pi * a * ((pi[None, :] - P) @ b))
    var = np.sum(pi * a * (a - abar))
    return float(abs(tau * cov * var))


def condensation_rate(chain: MarkovChain) -> float:
    """σ₀ = |π|·|π − 1/d|: the escape rate from θ = 0 (MODEL.md §6, stage 1)."""
    pi = np.asarray(chain.pi, float)
    return float(np.linalg.norm(pi) * np.linalg.norm(pi - 1.0 / pi.size))


def _group_index(model: AttentionModel, names) -> np.ndarray:
    sl = block_slices(model)
    return np.concatenate([np.arange(sl[n].start, sl[n].stop) for n in names])


def block_spectra(
    loss_fn: LossFn,
    model: AttentionModel,
    *,
    groups: dict[str, tuple[str, ...]] | None = None,
) -> dict[str, Float[np.ndarray, " _k"] | float]:
    """Eigenvalues of each diagonal block of the dense Hessian, and the couplings.

    Args:
        loss_fn: ``loss_fn(model) -> scalar``.
        model: a factorised AttentionModel (small: the Hessian is dense).
        groups: block name -> parameter names (default ``BLOCK_GROUPS``:
            (W_E, W_P) and (W_Q, W_K)).

    Returns:
        ``{name: eigenvalues ascending}`` for each group, ``"full"``: the whole
        Hessian's eigenvalues, and ``"coupling"``: the largest singular value of
        the off-diagonal blocks between groups (0 when the Hessian splits).
    """
    groups = BLOCK_GROUPS if groups is None else groups
    H = np.asarray(dense_hessian(loss_fn, model))
    idx = {k: _group_index(model, v) for k, v in groups.items()}
    out: dict = {k: np.linalg.eigvalsh(H[np.ix_(i, i)]) for k, i in idx.items()}
    names = list(idx)
    coupling = 0.0
    for x, nx in enumerate(names):
        for ny in names[x + 1 :]:
            block = H[np.ix_(idx[nx], idx[ny])]
            coupling = max(coupling, float(np.linalg.norm(block, 2)))
    out["coupling"] = coupling
    out["full"] = np.linalg.eigvalsh(H)
    return out


def restricted_newton(
    loss_fn: LossFn, model: AttentionModel, *, iters: int = 20, tol: float = 1e-12
) -> tuple[AttentionModel, list[float]]:
    """Newton's method on ∇L = 0 over (W_E, W_P) only, with W_Q = W_K = 0 fixed.

    A check of the closed form from any start (e.g. a plateau state): the
    (W_E, W_P) Hessian is singular (W_E → W_E G, W_P → G⁻¹W_P), so the step uses
    its spectral pseudo-inverse (eigenvalues below 1e-8·λ_max dropped).

    Returns:
        (model with W_Q = W_K = 0 at the critical point, |∇L| before each step).
    """
    zero = jnp.zeros_like(model.W_Q)
    m = model.d_model

    def join(x):
        d = model.d_vocab
        return AttentionModel(
            W_E=x[: d * m].reshape(d, m),
            W_Q=zero,
            W_K=zero,
            W_P=x[d * m :].reshape(m, d),
            tau=model.tau,
        )

    f = jax.jit(lambda x: loss_fn(join(x)))
    g, h = jax.jit(jax.grad(f)), jax.jit(jax.hessian(f))
    x = jnp.concatenate([jnp.ravel(model.W_E), jnp.ravel(model.W_P)])
    norms = []
    for _ in range(iters):
        grad = g(x)
        norms.append(float(jnp.linalg.norm(grad)))
        if norms[-1] < tol:
            break
        lam, V = jnp.linalg.eigh((h(x) + h(x).T) / 2)
        keep = jnp.abs(lam) > 1e-8 * jnp.max(jnp.abs(lam))
        x = x - V @ jnp.where(keep, (V.T @ grad) / jnp.where(keep, lam, 1.0), 0.0)
    return join(x), norms


def _top_vectors(X):
    U, s, Vt = np.linalg.svd(np.asarray(X, float))
    return U[:, 0], s, Vt[0]


def _erank(s):
    p = s / s.sum() if s.sum() > 0 else np.ones_like(s) / s.size
    p = p[p > 0]
    return float(np.exp(-np.sum(p * np.log(p))))


def structure(model: AttentionModel, pi: Float[np.ndarray, " d"]) -> dict[str, float]:
    """The stage-wise structural measurements of issue 13 at one model.

    Args:
        model: a factorised AttentionModel.
        pi: the stationary distribution [d].

    Returns:
        ``cos_u1_pi``: |cos(u₁(W_E), π)|; ``ratio_W_E``, ``ratio_W_P``, ``ratio_W_Q``,
        ``ratio_W_K``, ``ratio_W_A``: σ₂/σ₁ of each block; ``erank_W_Q``,
        ``erank_W_K``: effective ranks exp(H(σ/Σσ)) (m for an isotropic matrix, 1 for
        rank one); ``align_left``, ``align_right``: |u₁(W_A)·r| and |v₁(W_A)·r| with r
        = v₁(W_E), the condensed direction; ``align_rr``: |rᵀW_A r| / σ₁(W_A), 1 when
        W_A = σ r rᵀ; ``q_left``, ``q_right``: |u₁(W_Q)·r| and |v₁(W_Q)·r| (the
        saddle's unstable modes make W_Q = r xᵀ with x set by the initialisation).
    """
    pi = np.asarray(pi, float)
    uE, sE, r = _top_vectors(model.W_E)
    out = {"cos_u1_pi": float(abs(uE @ pi) / np.linalg.norm(pi))}
    for name in ("W_E", "W_P", "W_Q", "W_K", "W_A"):
        s = np.linalg.svd(np.asarray(getattr(model, name), float), compute_uv=False)
        out[f"ratio_{name}"] = float(s[1] / s[0]) if s[0] > 0 else 0.0
        if name in ("W_Q", "W_K"):
            out[f"erank_{name}"] = _erank(s)
    uQ, _, vQ = _top_vectors(model.W_Q)
    out["q_left"], out["q_right"] = float(abs(uQ @ r)), float(abs(vQ @ r))
    uA, sA, vA = _top_vectors(model.W_A)
    out["align_left"] = float(abs(uA @ r))
    out["align_right"] = float(abs(vA @ r))
    W_A = np.asarray(model.W_A, float)
    out["align_rr"] = float(abs(r @ W_A @ r) / sA[0]) if sA[0] > 0 else 0.0
    return out
