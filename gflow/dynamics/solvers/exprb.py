"""EXPRB32: a third-order exponential Rosenbrock solver with Lanczos φ-functions.

For y' = f(y) with Jacobian J at yₙ, write f(y) = J y + g(y). The exponential
Rosenbrock pair exprb32 (Hochbruck, Ostermann & Schweitzer 2009, SIAM J. Numer. Anal.
47(1)) takes

    U    = yₙ + h φ₁(hJ) f(yₙ)                        (exponential Rosenbrock-Euler)
    D    = g(U) − g(yₙ) = f(U) − f(yₙ) − J (U − yₙ)
    yₙ₊₁ = U + 2h φ₃(hJ) D                            (order 3)

with the embedded second-order solution U, so 2h φ₃(hJ) D is the error estimate.
φ₁(z) = (eᶻ − 1)/z, φ₃(z) = (eᶻ − 1 − z − z²/2)/z³. The stiff linear part is
integrated exactly, so there is no stability restriction and no order reduction on
stiff problems whose stiffness is in the linearisation, as in a gradient flow's late
phase (a few Hessian eigenvalues in the hundreds, the rest near 0).

For a gradient flow J = −H is symmetric, so φₖ(hJ)v is computed in the Krylov space
of J and v by m steps of Lanczos (Hessian-vector products by forward-mode AD),
φₖ(hJ)v ≈ ‖v‖ Qₘ φₖ(hTₘ) e₁, with Tₘ the m×m tridiagonal matrix diagonalised
exactly. Lanczos finds the few isolated stiff eigenvalues in a few steps, which is why
it beats a Chebyshev method here: a Chebyshev method pays √(h λ_max) stages for the
whole interval [−λ_max, 0]. The Lanczos relation J Qₘ = Qₘ Tₘ + βₘ qₘ₊₁ eₘᵀ gives
J (U − yₙ) without another product. Saad's estimate of each Krylov error, ‖v‖ βₘ
|eₘᵀ φₖ(hTₘ) e₁| along qₘ₊₁, is added to the error estimate, so the step-size
controller also keeps the Krylov error within the tolerance.

Vector-field evaluations per step: f(U), f(yₙ₊₁) (first same as last) and the
m + m₂ Jacobian-vector products (2 evaluations each) of the two Lanczos runs:
2 + 2(m + m₂), 18 with the defaults m = 6, m₂ = 2. The second run needs fewer steps:
D is a small nonlinear remainder, and its Krylov error is in the estimate too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PyTree, Real

from gflow.dynamics.tree import tree_scale


class ExpState(eqx.Module):
    """What EXPRB32 carries between steps."""

    f0: PyTree  # the vector field at the step's start (first same as last)
    rho: Float[Array, ""]  # −(most negative Ritz value) of the last Lanczos run
    num_evals: Int[Array, ""]  # vector-field evaluations in accepted steps (JVPs: 2)


def phi(k: int, x: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
    """φₖ(x) = Σⱼ xʲ/(j + k)!, by its Taylor series near 0 and the recurrence
    φₖ(x) = (φₖ₋₁(x) − 1/(k−1)!)/x elsewhere (k = 0…3)."""
    small = jnp.abs(x) < 0.5
    xs = jnp.where(small, x, 0.0)
    # float coefficients: 1/13! as an integer overflows int32 when x64 is off
    series = sum(xs**j * (1.0 / math.factorial(j + k)) for j in range(16))
    xl = jnp.where(small, 1.0, x)
    out = jnp.exp(xl) if k == 0 else jnp.expm1(xl) / xl
    for j in range(2, k + 1):
        out = (out - 1.0 / math.factorial(j - 1)) / xl
    return jnp.where(small, series, out)


def lanczos(matvec, v, m, steps=None):
    """``steps`` (default m, at most m) Lanczos steps with full reorthogonalisation on
    a symmetric operator from v, in buffers of size m (rows past ``steps`` stay 0).

    Returns (Q [m, n] orthonormal rows, α [m], β [m] with β[steps−1] the coupling to
    the next vector, the next vector q [n], ‖v‖).
    """
    n = v.size
    norm = jnp.linalg.norm(v)
    q = v / jnp.where(norm > 0, norm, 1.0)
    Q = jnp.zeros((m, n), v.dtype)
    alpha = jnp.zeros(m, v.dtype)
    beta = jnp.zeros(m, v.dtype)

    def body(j, carry):
        Q, alpha, beta, q = carry
        Q = Q.at[j].set(q)
        w = matvec(q)
        a = jnp.dot(q, w)
        w = w - Q.T @ (Q @ w)  # full reorthogonalisation (m ≪ n)
        w = w - Q.T @ (Q @ w)
        b = jnp.linalg.norm(w)
        ok = b > 1e-12 * jnp.maximum(jnp.abs(a), 1.0)
        q = jnp.where(ok, w / jnp.where(ok, b, 1.0), 0.0)
        return Q, alpha.at[j].set(a), beta.at[j].set(jnp.where(ok, b, 0.0)), q

    steps = m if steps is None else steps
    Q, alpha, beta, q = jax.lax.fori_loop(0, steps, body, (Q, alpha, beta, q))
    return Q, alpha, beta, q, norm


class EXPRB32(diffrax.AbstractSolver):
    """Third-order exponential Rosenbrock (exprb32) with Lanczos φ-functions and an
    embedded second-order error estimate, for ODEs with a symmetric Jacobian
    (gradient flows); order three for autonomous fields.

    Attributes:
        krylov_dim: Lanczos steps for φ₁(hJ) f. Too few for a step shows up as a
            large Krylov term in the error estimate, and the controller shrinks the
            step (on the default flow 4 let errors through, 6 to 16 took the same
            steps).
        correction_dim: Lanczos steps for φ₃(hJ) D (at most krylov_dim); D, the
            nonlinear remainder, is small: on the default flow 2 took fewer
            evaluations than 3, 4 or 6 at a smaller final error, 1 more.
    """

    krylov_dim: int = 6
    correction_dim: int = 2

    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar[Callable] = (
        diffrax.ThirdOrderHermitePolynomialInterpolation
    )

    def __check_init__(self):
        if self.krylov_dim < 2:
            raise ValueError(f"krylov_dim must be >= 2, got {self.krylov_dim}")
        if not 1 <= self.correction_dim <= self.krylov_dim:
            raise ValueError(
                f"correction_dim must lie in [1, krylov_dim], got {self.correction_dim}"
            )

    @property
    def evals_per_step(self) -> int:
        """f(U), f(y1) and the products (two evaluations each) of both Lanczos runs."""
        return 2 + 2 * (self.krylov_dim + self.correction_dim)

    def order(self, terms: PyTree[diffrax.AbstractTerm]) -> int:
        return 3

    def error_order(self, terms: PyTree[diffrax.AbstractTerm]) -> int:
        return 3

    def init(
        self,
        terms: PyTree[diffrax.AbstractTerm],
        t0: Real[ArrayLike, ""],
        t1: Real[ArrayLike, ""],
        y0: PyTree,
        args: PyTree,
    ) -> ExpState:
        return ExpState(
            f0=terms.vf(t0, y0, args),
            rho=jnp.zeros((), jax.tree.leaves(y0)[0].dtype),
            num_evals=jnp.ones((), jnp.int32),
        )

    def step(
        self,
        terms: PyTree[diffrax.AbstractTerm],
        t0: Real[ArrayLike, ""],
        t1: Real[ArrayLike, ""],
        y0: PyTree,
        args: PyTree,
        solver_state: ExpState,
        made_jump: Bool[ArrayLike, ""],
    ) -> tuple[PyTree, PyTree, dict[str, PyTree], ExpState, diffrax.RESULTS]:
        st = solver_state
        jumped = jnp.asarray(made_jump)
        f0 = jax.lax.cond(jumped, lambda: terms.vf(t0, y0, args), lambda: st.f0)
        y1, f1, y_error, rho = exprb32_step(
            terms, t0, t1 - t0, y0, f0, args, self.krylov_dim, self.correction_dim
        )
        new = ExpState(
            f0=f1,
            rho=rho,
            num_evals=st.num_evals + jumped + self.evals_per_step,
        )
        h = t1 - t0
        dense_info = dict(y0=y0, y1=y1, k0=tree_scale(h, f0), k1=tree_scale(h, f1))
        return y1, y_error, dense_info, new, diffrax.RESULTS.successful

    def func(
        self,
        terms: PyTree[diffrax.AbstractTerm],
        t0: Real[ArrayLike, ""],
        y0: PyTree,
        args: PyTree,
    ) -> PyTree:
        return terms.vf(t0, y0, args)


def exprb32_step(terms, t0, h, y0, f0, args, m, m2=None):
    """(y1, f(y1), error estimate, stiffness) of one exprb32 step; the stiffness is
    minus the most negative Ritz value of the first Lanczos run (0 if none is).

    Both halves, U = y0 + h φ₁(hJ) f0 and y1 = U + 2h φ₃(hJ) D, are one loop body
    (Lanczos, a φ-function, a new point, f there), so the vector field and its
    Jacobian-vector product are traced and compiled once.
    """
    x0, unravel = ravel_pytree(y0)
    fx0 = ravel_pytree(f0)[0]

    def field(x, t):
        return ravel_pytree(terms.vf(t, unravel(x), args))[0]

    def matvec(w):
        return jax.jvp(lambda x: field(x, t0), (x0,), (w,))[1]

    m2 = m if m2 is None else m2

    def half(phase, carry):
        base, v, err, _, rho = carry
        first = phase == 0
        steps = jnp.where(first, m, m2)
        Q, alpha, beta, q_next, norm = lanczos(matvec, v, m, steps)
        T = jnp.diag(alpha) + jnp.diag(beta[:-1], 1) + jnp.diag(beta[:-1], -1)
        theta, S = jnp.linalg.eigh(T)
        c = S @ (jnp.where(first, phi(1, h * theta), phi(3, h * theta)) * S[0])
        scale = jnp.where(first, 1.0, 2.0) * h * norm
        step = scale * (Q.T @ c)  # h φ₁(hJ) f0, then 2h φ₃(hJ) D
        tail = scale * beta[steps - 1] * c[steps - 1] * q_next  # Saad's estimate
        x = base + step
        fx = field(x, t0 + h)
        # D = f(U) − f0 − J (U − y0), J (U − y0) from J Q = Q T + β q_next e_mᵀ
        d = fx - fx0 - (scale * (Q.T @ (T @ c)) + tail)
        # the estimates add in magnitude (none may cancel another): both Krylov
        # errors and 2h φ₃(hJ) D, the distance to the embedded solution U
        err = err + jnp.abs(tail) + jnp.where(first, 0.0, jnp.abs(step))
        rho = jnp.where(first, jnp.maximum(-jnp.min(theta), 0.0), rho)
        return x, d, err, fx, rho

    zero = jnp.zeros_like(x0)
    start = (x0, fx0, zero, zero, jnp.zeros((), x0.dtype))
    x1, _, err, fx1, rho = jax.lax.fori_loop(0, 2, half, start)
    return unravel(x1), unravel(fx1), unravel(err), rho
