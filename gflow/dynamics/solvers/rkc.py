"""A second-order Runge-Kutta-Chebyshev solver (RKC2) for stiff gradient flows.

The gradient flow's Jacobian is −H, symmetric with a real spectrum. Its late phase is
stiff: λ_max(H) is in the hundreds while the slow directions move at rates near 1e-3,
so an explicit solver such as Tsit5 takes steps limited by stability (h ≲ 3/λ_max), not
by accuracy. RKC2 (Sommeijer, Shampine & Verwer 1997) uses s stages whose stability
interval along the negative real axis grows like 0.65 s², so a step of size h costs
about √(1.54 h ρ) gradient evaluations instead of h ρ / 3; the stage count s is chosen
per step from an estimate ρ of the spectral radius. ρ comes from power iteration on
Jacobian-vector products of the vector field (for a gradient flow, Hessian-vector
products), warm-started from step to step so that one product per step keeps it
tracked. An embedded error estimate lets Diffrax's PIDController pick h.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PyTree, Real

from gflow.dynamics.tree import tree_axpy, tree_norm, tree_scale

#: RKC2's damping; with it, s stages are stable for h ρ ≤ 0.653 s².
DAMPING = 2.0 / 13.0


class RKCState(eqx.Module):
    """What RKC carries between steps."""

    f0: PyTree  # the vector field at the step's start (first same as last)
    v: PyTree  # the power iteration's current vector, unit norm
    rho: Float[Array, ""]  # spectral-radius estimate of the Jacobian
    num_evals: Int[Array, ""]  # vector-field evaluations in accepted steps (JVPs: 2)
    max_stages: Int[Array, ""]  # the largest stage count used so far


def num_stages(h_rho: Real[ArrayLike, "*shape"]) -> Int[Array, "*shape"]:
    """Stages s that make RKC2 stable for h ρ (stability bound ≈ 0.653 s²)."""
    return 1 + jnp.floor(jnp.sqrt(1.0 + 1.54 * h_rho)).astype(jnp.int32)


class RKC2(diffrax.AbstractSolver):
    """Second-order Runge-Kutta-Chebyshev with an embedded error estimate.

    For ODEs whose Jacobian has its spectrum near the negative real axis (gradient
    flows: −H with H symmetric). Use with ``diffrax.PIDController``; the stage count
    adapts to the step and to the tracked spectral radius, so stiffness costs
    √(h λ_max) evaluations per step rather than h λ_max.

    Attributes:
        safety: factor on the power-iteration estimate of ρ (power iteration
            approaches ρ from below).
        power_iters: Jacobian-vector products per step to update ρ.
        init_power_iters: products at the first step (cold start).
        max_stages: upper limit on s; a step that would need more is rejected (its
            error is set to infinity) so the controller shrinks it.
    """

    safety: float = 1.2
    power_iters: int = 1
    init_power_iters: int = 30
    max_stages: int = 1000

    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar[Callable] = (
        diffrax.ThirdOrderHermitePolynomialInterpolation
    )

    def __check_init__(self):
        if not self.safety >= 1.0:
            raise ValueError(f"safety must be >= 1, got {self.safety}")
        if self.power_iters < 1 or self.init_power_iters < 1:
            raise ValueError("power_iters and init_power_iters must be >= 1")
        if self.max_stages < 2:
            raise ValueError(f"max_stages must be >= 2, got {self.max_stages}")

    def order(self, terms: PyTree[diffrax.AbstractTerm]) -> int:
        return 2

    def init(
        self,
        terms: PyTree[diffrax.AbstractTerm],
        t0: Real[ArrayLike, ""],
        t1: Real[ArrayLike, ""],
        y0: PyTree,
        args: PyTree,
    ) -> RKCState:
        v, rho = power_iteration(
            terms, t0, y0, args, start_vector(y0), self.init_power_iters
        )
        f0 = terms.vf(t0, y0, args)
        return RKCState(
            f0=f0,
            v=v,
            rho=rho,
            num_evals=jnp.asarray(1 + 2 * self.init_power_iters, jnp.int32),
            max_stages=jnp.zeros((), jnp.int32),
        )

    def step(
        self,
        terms: PyTree[diffrax.AbstractTerm],
        t0: Real[ArrayLike, ""],
        t1: Real[ArrayLike, ""],
        y0: PyTree,
        args: PyTree,
        solver_state: RKCState,
        made_jump: Bool[ArrayLike, ""],
    ) -> tuple[PyTree, PyTree, dict[str, PyTree], RKCState, diffrax.RESULTS]:
        tracked = self.track(terms, t0, y0, args, solver_state, made_jump)
        return self.advance(terms, t0, t1, y0, args, tracked)

    def track(
        self,
        terms: PyTree[diffrax.AbstractTerm],
        t0: Real[ArrayLike, ""],
        y0: PyTree,
        args: PyTree,
        solver_state: RKCState,
        made_jump: Bool[ArrayLike, ""],
    ) -> RKCState:
        """The state with f0 at y0 and ρ updated by ``power_iters`` products."""
        return track(terms, t0, y0, args, solver_state, made_jump, self.power_iters)

    def advance(
        self,
        terms: PyTree[diffrax.AbstractTerm],
        t0: Real[ArrayLike, ""],
        t1: Real[ArrayLike, ""],
        y0: PyTree,
        args: PyTree,
        tracked: RKCState,
    ) -> tuple[PyTree, PyTree, dict[str, PyTree], RKCState, diffrax.RESULTS]:
        """One RKC2 step from a state whose f0 and ρ belong to (t0, y0)."""
        f0 = tracked.f0
        h = t1 - t0
        s_needed = num_stages(h * self.safety * jnp.maximum(tracked.rho, 0.0))
        s = jnp.clip(s_needed, 2, self.max_stages)
        y1 = rkc_stages(terms, t0, h, y0, f0, args, s.astype(_dtype(y0)))
        f1 = terms.vf(t1, y1, args)
        # Sommeijer et al.'s estimate: (12 (y0 - y1) + 6 h (f0 + f1)) / 15
        too_stiff = s_needed > self.max_stages
        y_error = jax.tree.map(
            lambda a, b, fa, fb: jnp.where(
                too_stiff, jnp.inf, 0.8 * (a - b) + 0.4 * h * (fa + fb)
            ),
            y0,
            y1,
            f0,
            f1,
        )
        dense_info = dict(y0=y0, y1=y1, k0=tree_scale(h, f0), k1=tree_scale(h, f1))
        new_state = RKCState(
            f0=f1,
            v=tracked.v,
            rho=tracked.rho,
            num_evals=tracked.num_evals + s,  # s - 1 stages, then f1
            max_stages=jnp.maximum(tracked.max_stages, s),
        )
        return y1, y_error, dense_info, new_state, diffrax.RESULTS.successful

    def func(
        self,
        terms: PyTree[diffrax.AbstractTerm],
        t0: Real[ArrayLike, ""],
        y0: PyTree,
        args: PyTree,
    ) -> PyTree:
        return terms.vf(t0, y0, args)


def _dtype(y):
    return jax.tree.leaves(y)[0].dtype


def start_vector(y: PyTree) -> PyTree:
    """A fixed, generic unit vector shaped like y (deterministic)."""
    leaves, treedef = jax.tree.flatten(y)
    keys = jax.random.split(jax.random.key(0), len(leaves))
    out = [jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves)]
    v = jax.tree.unflatten(treedef, out)
    return tree_scale(1.0 / tree_norm(v), v)


def power_iteration(terms, t, y, args, v, iters):
    """Power iteration on w ↦ J(y) w; returns (unit vector, |J v| estimate).

    J is the Jacobian of the vector field at (t, y), applied by forward-mode
    products (for a gradient flow, Hessian-vector products); ``v`` is the start
    vector (unit norm), ``iters`` the number of products.
    """

    def jvp(w):
        return jax.jvp(lambda z: terms.vf(t, z, args), (y,), (w,))[1]

    def body(_, carry):
        v, _ = carry
        w = jvp(v)
        n = tree_norm(w)
        safe = n > 0
        return tree_scale(jnp.where(safe, 1.0 / jnp.where(safe, n, 1.0), 0.0), w), n

    v, rho = jax.lax.fori_loop(0, iters, body, (v, jnp.zeros((), _dtype(y))))
    # a zero Jacobian leaves v = 0; restart from a fixed vector next time
    v = jax.lax.cond(tree_norm(v) > 0, lambda: v, lambda: start_vector(y))
    return v, rho


def track(terms, t0, y0, args, state: RKCState, made_jump, power_iters) -> RKCState:
    """``state`` with f0 at (t0, y0) (recomputed after a jump) and ρ updated by
    ``power_iters`` Jacobian-vector products, each counted as two evaluations."""
    f0 = jax.lax.cond(made_jump, lambda: terms.vf(t0, y0, args), lambda: state.f0)
    v, rho = power_iteration(terms, t0, y0, args, state.v, power_iters)
    evals = 2 * power_iters + jnp.where(made_jump, 1, 0)
    return RKCState(
        f0=f0,
        v=v,
        rho=rho,
        num_evals=state.num_evals + evals,
        max_stages=state.max_stages,
    )


def rkc_stages(terms, t0, h, y0, f0, args, s):
    """y1 after s RKC2 stages from y0 with f0 = f(t0, y0) (Verwer et al. recursion).

    T_j are Chebyshev polynomials evaluated at w0 = 1 + ε/s²; the coefficients
    b_j = T_j''(w0)/T_j'(w0)² make every stage second-order consistent.
    """
    w0 = 1.0 + DAMPING / s**2
    t_sq = w0**2 - 1.0
    t_rt = jnp.sqrt(t_sq)
    arg = s * jnp.log(w0 + t_rt)
    w1 = jnp.sinh(arg) * t_sq / (jnp.cosh(arg) * s * t_rt - w0 * jnp.sinh(arg))
    b1 = 1.0 / (2.0 * w0) ** 2
    mus = w1 * b1
    y1 = tree_axpy(h * mus, f0, y0)
    one = jnp.ones_like(w0)
    zero = jnp.zeros_like(w0)
    # carry: Y_{j-1}, Y_{j-2}, θ_{j-1}, θ_{j-2}, b_{j-1}, b_{j-2},
    #        T_{j-1}, T_{j-2}, T'_{j-1}, T'_{j-2}, T''_{j-1}, T''_{j-2} (all at w0)
    carry = (y1, y0, mus, zero, b1, b1, w0, one, one, zero, zero, zero)

    def body(j, c):
        yj1, yj2, th1, th2, bj1, bj2, z1, z2, dz1, dz2, d2z1, d2z2 = c
        z = 2.0 * w0 * z1 - z2
        dz = 2.0 * w0 * dz1 - dz2 + 2.0 * z1
        d2z = 2.0 * w0 * d2z1 - d2z2 + 4.0 * dz1
        bj = d2z / dz**2
        aj1 = 1.0 - z1 * bj1
        mu = 2.0 * w0 * bj / bj1
        nu = -bj / bj2
        mus_j = mu * w1 / w0
        fj1 = terms.vf(t0 + h * th1, yj1, args)
        yj = jax.tree.map(
            lambda a1, a2, a0, fa, fb: (
                mu * a1 + nu * a2 + (1.0 - mu - nu) * a0 + h * mus_j * (fa - aj1 * fb)
            ),
            yj1,
            yj2,
            y0,
            fj1,
            f0,
        )
        th = mu * th1 + nu * th2 + mus_j * (1.0 - aj1)
        return (yj, yj1, th, th1, bj, bj1, z, z1, dz, dz1, d2z, d2z1)

    out = jax.lax.fori_loop(2, s.astype(jnp.int32) + 1, body, carry)
    return out[0]
