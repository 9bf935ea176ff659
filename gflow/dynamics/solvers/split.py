"""SplitRKC2: Runge-Kutta-Chebyshev steps with the Hessian's outlying eigenvalues split
off and integrated exponentially.

A LayerNorm block's flow stiffens into one (or a few) outlying Hessian eigenvalues far
above a band: on the standard block λ₁ ≈ 6.5e6 against λ₂ ≈ 1.2e5 at t = 4
(docs/integrators.md, "The standard block's spectrum"). RKC2 pays √(1.54 h λ₁)
stages a step for the whole interval [−λ₁, 0], although only λ₁'s direction needs it;
EXPRB32's Krylov space cannot resolve the band once h λ₂ is large. This solver
splits the field f = −∇L along the k outlying directions U (orthonormal rows,
Hessian Ritz vectors tracked by one subspace iteration a step) into

    f = P f + (I − P) f,        P = Uᵀ U (held fixed over a step),

and takes the Strang composition of their flows over a step h:

    fast half step  y_a = y₀ + Uᵀ [ (h/2) φ₁(−(h/2) Λ) U f(y₀) ]
    slow step       y_b = RKC2 over h on y' = (I − P) f(y), from y_a
    fast half step  y₁ = y_b + Uᵀ [ (h/2) φ₁(−(h/2) Λ) U f(y_b) ]

The fast half steps are exponential Euler steps of y' = P f(y), whose Jacobian along
U is −Λ (the Ritz values): exact for a quadratic loss whose U are eigenvectors, and
a projection onto the slow manifold U f = 0 once h λ ≫ 1. The slow step's Jacobian
is (I − P) J (I − P), whose spectral radius is λ_{k+1}, so its RKC2 stages number
√(1.54 h λ_{k+1}) instead of √(1.54 h λ₁); λ_{k+1} is the (k+1)-th Ritz value of the
same subspace iteration, and on a band it approaches from below, so it is taken with
a safety factor and kept sticky (5 % decay a step).

For a quadratic loss whose U are exact eigenvectors the two flows commute, the
splitting is exact and the only error is RKC2's on the band. In general Strang's
splitting is second order; its error is not in the estimate, which is RKC2's
embedded estimate of the slow step (Sommeijer, Shampine & Verwer 1997). On a flow
whose outliers are stiff (h λ ≫ 1) the fast half steps are projections onto the slow
manifold and the splitting error is O(1/λ). tests/test_split_rkc.py compares it
with a tight reference on a nonlinear flow; on the standard block it is compared
with tighter runs in BENCHMARKS.md ("The block to t = 20"). Inside AutoSwitch its
estimate is scaled by 30 for the splitting it leaves out.

Evaluations a step: the s − 1 stages of RKC2 and f at y_a, y_b and y₁ (y₁'s is the
next step's f(y₀)), plus 2(k + 1) for the k + 1 Hessian-vector products of the
subspace iteration: s + 2 + 2(k + 1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PyTree, Real

from gflow.dynamics.solvers.exprb import phi
from gflow.dynamics.solvers.rkc import num_stages, rkc_stages
from gflow.dynamics.tree import tree_scale


class SplitState(eqx.Module):
    """What SplitRKC2 carries between steps."""

    f0: PyTree  # the vector field at the step's start (first same as last)
    basis: Float[Array, "k1 n"]  # the subspace iteration's orthonormal rows
    ritz: Float[Array, " k1"]  # their Ritz values (Hessian), descending
    rho: Float[Array, ""]  # the spectral radius: the top Ritz value, λ₁'s estimate
    band: Float[Array, ""]  # the slow step's spectral radius, λ_{k+1} (sticky)
    num_evals: Int[Array, ""]  # vector-field evaluations in accepted steps (JVPs: 2)
    max_stages: Int[Array, ""]  # the largest stage count used so far


class _Slow(eqx.Module):
    """The slow part (I − UᵀU) f of a flat vector field, as a term for RKC2's stages."""

    field: Callable
    U: Float[Array, "k n"]

    def vf(self, t, y, args):
        f = self.field(y, t)
        return f - self.U.T @ (self.U @ f)


def subspace_step(hvp, basis: Float[Array, "k1 n"]):
    """One subspace iteration with Rayleigh-Ritz on the symmetric operator ``hvp``.

    Returns (Ritz values descending, the Ritz vectors as rows, the next basis: the
    Ritz rotation of H·basis, orthonormalised), from len(basis) products.
    """
    # one product after another (lax.map, not vmap): a vmapped product holds k + 1
    # copies of the backward pass's intermediates, GBs on a 10⁴-window text model
    W = jax.lax.map(hvp, basis)  # rows: H b_i
    G = basis @ W.T
    G = 0.5 * (G + G.T)
    theta, S = jnp.linalg.eigh(G)  # ascending
    order = jnp.arange(theta.size)[::-1]
    theta, S = theta[order], S[:, order]
    ritz_vectors = S.T @ basis
    nxt, _ = jnp.linalg.qr((S.T @ W).T)  # columns orthonormal, Ritz order kept
    return theta, ritz_vectors, nxt.T


def subspace_iterations(field, t, x, basis: Float[Array, "k1 n"], iters):
    """``iters`` subspace iterations (``subspace_step``) on the Hessian of the flat
    gradient-flow field ``field(x, t)`` at x, −∂field/∂x, from ``basis``.

    Returns (Ritz values descending, the next basis), from len(basis)·iters
    Hessian-vector products.
    """

    def hvp(w):
        return -jax.jvp(lambda z: field(z, t), (x,), (w,))[1]

    def body(_, carry):
        return subspace_step(hvp, carry[1])[::2]

    start = (jnp.zeros(basis.shape[0], x.dtype), basis)
    return jax.lax.fori_loop(0, iters, body, start)


class SplitRKC2(diffrax.AbstractSolver):
    """RKC2 with the Hessian's ``outliers`` top eigendirections split off and
    integrated by exponential half steps (Strang splitting); second order.

    For gradient flows (symmetric Jacobian) whose stiffness sits in a few outlying
    eigenvalues above a band: each step's Chebyshev stages then pay for the band's
    top, λ_{k+1}, not for λ₁. Use with ``diffrax.PIDController``.

    Attributes:
        outliers: k, the directions split off.
        safety: factor on the slow step's spectral radius (the (k+1)-th Ritz value
            approaches λ_{k+1} from below).
        init_iters: subspace iterations at the first step (cold start).
        max_stages: upper limit on RKC2's stages; a step that would need more is
            rejected (infinite error) so the controller shrinks it.
    """

    outliers: int = 1
    safety: float = 1.5
    init_iters: int = 30
    max_stages: int = 1000

    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar[Callable] = (
        diffrax.ThirdOrderHermitePolynomialInterpolation
    )

    def __check_init__(self):
        if self.outliers < 1:
            raise ValueError(f"outliers must be >= 1, got {self.outliers}")
        if not self.safety >= 1.0:
            raise ValueError(f"safety must be >= 1, got {self.safety}")
        if self.init_iters < 1:
            raise ValueError(f"init_iters must be >= 1, got {self.init_iters}")
        if self.max_stages < 2:
            raise ValueError(f"max_stages must be >= 2, got {self.max_stages}")

    def order(self, terms: PyTree[diffrax.AbstractTerm]) -> int:
        return 2

    def _flat(self, terms, y0, args):
        x0, unravel = ravel_pytree(y0)

        def field(x, t):
            return ravel_pytree(terms.vf(t, unravel(x), args))[0]

        return x0, unravel, field

    def init(
        self,
        terms: PyTree[diffrax.AbstractTerm],
        t0: Real[ArrayLike, ""],
        t1: Real[ArrayLike, ""],
        y0: PyTree,
        args: PyTree,
    ) -> SplitState:
        x0, _, field = self._flat(terms, y0, args)
        k1 = min(self.outliers + 1, x0.size)
        start = jax.random.normal(jax.random.key(0), (k1, x0.size), x0.dtype)
        basis = jnp.linalg.qr(start.T)[0].T
        ritz, basis = subspace_iterations(field, t0, x0, basis, self.init_iters)
        return SplitState(
            f0=terms.vf(t0, y0, args),
            basis=basis,
            ritz=ritz,
            rho=jnp.maximum(ritz[0], 0.0),
            band=jnp.maximum(ritz[-1], 0.0),
            num_evals=jnp.asarray(1 + 2 * k1 * self.init_iters, jnp.int32),
            max_stages=jnp.zeros((), jnp.int32),
        )

    def step(
        self,
        terms: PyTree[diffrax.AbstractTerm],
        t0: Real[ArrayLike, ""],
        t1: Real[ArrayLike, ""],
        y0: PyTree,
        args: PyTree,
        solver_state: SplitState,
        made_jump: Bool[ArrayLike, ""],
    ) -> tuple[PyTree, PyTree, dict[str, PyTree], SplitState, diffrax.RESULTS]:
        st = solver_state
        h = t1 - t0
        x0, unravel, field = self._flat(terms, y0, args)
        f0 = jax.lax.cond(
            jnp.asarray(made_jump), lambda: terms.vf(t0, y0, args), lambda: st.f0
        )
        fx0 = ravel_pytree(f0)[0]

        out = split_rkc2_step(
            field,
            t0,
            h,
            x0,
            fx0,
            st.basis,
            st.band,
            safety=self.safety,
            max_stages=self.max_stages,
        )
        y1, f1 = unravel(out.x1), unravel(out.f1)
        new = SplitState(
            f0=f1,
            basis=out.basis,
            ritz=out.ritz,
            rho=jnp.maximum(out.ritz[0], 0.0),
            band=out.band,
            num_evals=st.num_evals + out.evals + jnp.asarray(made_jump),
            max_stages=jnp.maximum(st.max_stages, out.stages),
        )
        dense_info = dict(y0=y0, y1=y1, k0=tree_scale(h, f0), k1=tree_scale(h, f1))
        return y1, unravel(out.error), dense_info, new, diffrax.RESULTS.successful

    def func(
        self,
        terms: PyTree[diffrax.AbstractTerm],
        t0: Real[ArrayLike, ""],
        y0: PyTree,
        args: PyTree,
    ) -> PyTree:
        return terms.vf(t0, y0, args)


class SplitStep(eqx.Module):
    """One SplitRKC2 step on flat vectors (``split_rkc2_step``)."""

    x1: Float[Array, " n"]  # the new point (x0 where the step was refused)
    f1: Float[Array, " n"]  # the field there
    error: Float[
        Array, " n"
    ]  # RKC2's embedded estimate of the slow step (inf: refused)
    ritz: Float[Array, " k1"]  # Ritz values, descending: ritz[0] estimates λ₁
    basis: Float[Array, "k1 n"]  # the next step's subspace basis
    band: Float[Array, ""]  # the slow step's spectral radius (sticky)
    stages: Int[Array, ""]  # RKC2's stages s
    evals: Int[Array, ""]  # vector-field evaluations (products count 2)


def split_rkc2_step(
    field,
    t0,
    h,
    x0,
    fx0,
    basis,
    band,
    *,
    safety,
    max_stages,
    iters=1,
    refuse_above=None,
) -> SplitStep:
    """One step of SplitRKC2 on the flat field ``field(x, t)`` from x0 (field fx0),
    after ``iters`` subspace iterations from ``basis`` (the tracked subspace; more
    after a pause in which it went stale). A step whose RKC2 stages would exceed
    ``max_stages``, or ``refuse_above`` (a traced count: AutoSwitch's limit on a
    first step), is refused before its stages are computed: it returns x0 with an
    infinite error, for the cost of the products alone.
    """

    def hvp(w):
        return -jax.jvp(lambda x: field(x, t0), (x0,), (w,))[1]

    basis = jax.lax.fori_loop(
        0, iters - 1, lambda _, b: subspace_step(hvp, b)[2], basis
    )
    ritz, vectors, basis = subspace_step(hvp, basis)
    k = vectors.shape[0] - 1
    U, lam = vectors[:k], jnp.maximum(ritz[:k], 0.0)
    band = jnp.maximum(jnp.maximum(ritz[k], 0.0), 0.95 * band)
    s_needed = num_stages(h * safety * band)
    s = jnp.clip(s_needed, 2, max_stages)
    refused = s_needed > max_stages
    if refuse_above is not None:
        refused = refused | (s_needed > refuse_above)

    def steps():
        half = 0.5 * h
        gain = half * phi(1, -half * lam)  # (h/2) φ₁(−(h/2)λ)
        x_a = x0 + U.T @ (gain * (U @ fx0))
        slow = _Slow(field, U)
        fa = slow.vf(t0, x_a, None)
        x_b = rkc_stages(slow, t0, h, x_a, fa, None, s.astype(x0.dtype))
        f_b = field(x_b, t0 + h)
        fb = f_b - U.T @ (U @ f_b)
        x1 = x_b + U.T @ (gain * (U @ f_b))
        err = 0.8 * (x_a - x_b) + 0.4 * h * (fa + fb)
        return x1, field(x1, t0 + h), err, s + 2

    def refuse():
        return x0, fx0, jnp.full_like(x0, jnp.inf), jnp.zeros_like(s)

    x1, f1, err, stage_evals = jax.lax.cond(refused, refuse, steps)
    # the s - 1 stages and f at y_a, y_b and y1; the products of the iterations
    evals = stage_evals + 2 * (k + 1) * iters
    return SplitStep(x1, f1, err, ritz, basis, band, s, evals)
