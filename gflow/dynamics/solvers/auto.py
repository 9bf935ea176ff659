"""The stiffness-aware default: Tsit5 steps while the flow is not stiff, exponential
Rosenbrock (EXPRB32) steps once Tsit5's steps are limited by stability and the
exponential steps are cheaper.

Stiffness is detected for free, from Tsit5's own stages (Hairer, Nørsett & Wanner,
Solving ODEs I §II.4, as in Hairer's DOPRI5 code): the last two stages are both
evaluated at t0 + h, at the points y₆ (the sixth stage) and y₇ = y₁ (the solution), so

    h ρ ≈ h ‖f(y₇) − f(y₆)‖ / ‖y₇ − y₆‖

estimates h times the Jacobian's spectral radius. While it stays below ``switch_on``
(Tsit5's real stability interval ends near 3.3) the solver is Tsit5 at Tsit5's cost:
six evaluations a step, no Jacobian-vector product. Once it reaches ``switch_on`` the
next step is an EXPRB32 step, which costs 2 + 2(m + m₂) = 18 evaluations (m = 6 and
m₂ = 2 Lanczos steps) however large h ρ is, while Tsit5 at its stability limit pays
about 6/(3.3/ρ) ≈ 1.8 ρ per unit time. So the exponential steps are kept while
h ρ ≥ ``switch_off`` = 18/1.8 = 10 (ρ now minus the most negative Lanczos Ritz value,
kept sticky) and Tsit5 takes over below it. Two counts
stop the switch from oscillating: a switch to EXPRB32 waits ``cooldown`` accepted
Tsit5 steps after the last switch back, and EXPRB32 keeps at least ``probation``
steps, enough for the controller to grow h from Tsit5's stability-limited step. One
PID controller drives both; EXPRB32's error estimate is multiplied by
``stiff_error_scale`` first, which calibrates the two methods' global errors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PyTree, Real

from gflow.dynamics.solvers.exprb import EXPRB32, exprb32_step
from gflow.dynamics.tree import tree_norm, tree_scale


class AutoState(eqx.Module):
    """What AutoSwitch carries between steps."""

    f0: PyTree  # the vector field at the step's start (first same as last)
    rho: Float[Array, ""]  # spectral radius: Hairer's estimate, then Lanczos's
    num_evals: Int[Array, ""]  # vector-field evaluations in accepted steps (JVPs: 2)
    stiff: Bool[Array, ""]  # the next step is an exponential step
    steps_in_mode: Int[Array, ""]  # accepted steps since the last switch
    num_switches: Int[Array, ""]  # how often the method changed, either way


class AutoSwitch(diffrax.AbstractSolver):
    """Tsit5 until its own stages say the flow is stiff, then EXPRB32 (and back).

    The defaults were chosen on the default Markov flow (docs/integrators.md): to
    t = 3000 at rtol 1e-6 it ends closer to a Dopri8 reference than Tsit5 with about
    48× fewer gradient evaluations, and to t = 400 it costs 1.04× Tsit5's.

    Attributes:
        stiff: the exponential solver of the stiff phase.
        switch_on: Hairer's h ρ from Tsit5's stages at which EXPRB32 takes over
            (Tsit5's real stability interval ends near 3.3).
        switch_off: h ρ (ρ from Lanczos) below which Tsit5 takes over again: where
            EXPRB32's 2 + 2(m + m₂) evaluations a step cost more than
            stability-limited Tsit5 steps (18/1.8 = 10 with EXPRB32's defaults).
        cooldown: accepted Tsit5 steps after a switch back before EXPRB32 may be
            tried again.
        probation: accepted EXPRB32 steps before it may hand back to Tsit5.
        stiff_error_scale: factor on EXPRB32's error estimate before the controller
            sees it (its steps then run at a tolerance this many times tighter);
            with 1 the final error at t = 3000 was already below Tsit5's.
    """

    stiff: EXPRB32 = EXPRB32()
    switch_on: float = 2.5
    switch_off: float = 10.0
    cooldown: int = 200
    probation: int = 3
    stiff_error_scale: float = 1.0

    #: the methods of its steps, as ``method_in_use`` numbers them
    method_names: ClassVar[tuple[str, ...]] = ("Tsit5", "EXPRB32")

    term_structure: ClassVar = diffrax.AbstractTerm
    # Tsit5's quartic dense output; an exponential step fills its stages so that the
    # quartic is the cubic Hermite polynomial of the step (``hermite_stages``)
    interpolation_cls: ClassVar[Callable] = diffrax.Tsit5.interpolation_cls

    def __check_init__(self):
        if not (self.switch_on > 0 and self.switch_off > 0):
            raise ValueError(
                "switch_on and switch_off must be > 0, got "
                f"{self.switch_on}, {self.switch_off}"
            )
        if self.cooldown < 0 or self.probation < 0:
            raise ValueError(
                "cooldown and probation must be >= 0, got "
                f"{self.cooldown}, {self.probation}"
            )
        if not self.stiff_error_scale > 0:
            raise ValueError(
                f"stiff_error_scale must be > 0, got {self.stiff_error_scale}"
            )

    def method_in_use(self, state: AutoState, h: Real[ArrayLike, ""]) -> Int[Array, ""]:
        """0 (Tsit5) or 1 (EXPRB32): the method of the next step from ``state``."""
        return state.stiff.astype(jnp.int32)

    def order(self, terms: PyTree[diffrax.AbstractTerm]) -> int:
        return 5  # Tsit5's: the controller then steps exactly as for Tsit5

    def init(
        self,
        terms: PyTree[diffrax.AbstractTerm],
        t0: Real[ArrayLike, ""],
        t1: Real[ArrayLike, ""],
        y0: PyTree,
        args: PyTree,
    ) -> AutoState:
        return AutoState(
            f0=terms.vf(t0, y0, args),
            rho=jnp.zeros((), jax.tree.leaves(y0)[0].dtype),
            num_evals=jnp.ones((), jnp.int32),
            stiff=jnp.zeros((), bool),
            steps_in_mode=jnp.asarray(self.cooldown, jnp.int32),  # may switch at once
            num_switches=jnp.zeros((), jnp.int32),
        )

    def step(
        self,
        terms: PyTree[diffrax.AbstractTerm],
        t0: Real[ArrayLike, ""],
        t1: Real[ArrayLike, ""],
        y0: PyTree,
        args: PyTree,
        solver_state: AutoState,
        made_jump: Bool[ArrayLike, ""],
    ) -> tuple[PyTree, PyTree, dict[str, PyTree], AutoState, diffrax.RESULTS]:
        st = solver_state
        h = t1 - t0
        jumped = jnp.asarray(made_jump)
        f0 = jax.lax.cond(jumped, lambda: terms.vf(t0, y0, args), lambda: st.f0)

        def explicit():
            y1, f1, y_error, h_rho, ks = tsit5_step(terms, t0, h, y0, f0, args)
            return y1, f1, y_error, h_rho, 6, ks

        def exponential():
            y1, f1, y_error, rho = exprb32_step(
                terms,
                t0,
                h,
                y0,
                f0,
                args,
                self.stiff.krylov_dim,
                self.stiff.correction_dim,
            )
            y_error = tree_scale(self.stiff_error_scale, y_error)
            ks = hermite_stages(h, y0, y1, f0, f1)
            return y1, f1, y_error, h * rho, self.stiff.evals_per_step, ks

        y1, f1, y_error, h_rho, evals, ks = jax.lax.cond(
            st.stiff, exponential, explicit
        )
        # Lanczos on f0 misses the stiff end of the spectrum once f0 has no component
        # along it (the stiff directions have relaxed): keep the estimate sticky in
        # the stiff phase, forgetting 5% a step, so that a switch back to Tsit5
        # needs the spectrum to have really shrunk
        h_rho = jnp.where(st.stiff, jnp.maximum(h_rho, 0.95 * h * st.rho), h_rho)
        settled = st.steps_in_mode >= jnp.where(st.stiff, self.probation, self.cooldown)
        wanted = jnp.where(st.stiff, h_rho >= self.switch_off, h_rho >= self.switch_on)
        stiff = jnp.where(settled, wanted, st.stiff)
        new = AutoState(
            f0=f1,
            rho=jnp.where(h > 0, h_rho / jnp.where(h > 0, h, 1.0), 0.0),
            num_evals=st.num_evals + jumped + evals,
            stiff=stiff,
            steps_in_mode=jnp.where(stiff == st.stiff, st.steps_in_mode + 1, 0),
            num_switches=st.num_switches + (stiff != st.stiff),
        )
        dense_info = dict(y0=y0, y1=y1, k=ks)
        return y1, y_error, dense_info, new, diffrax.RESULTS.successful

    def func(
        self,
        terms: PyTree[diffrax.AbstractTerm],
        t0: Real[ArrayLike, ""],
        y0: PyTree,
        args: PyTree,
    ) -> PyTree:
        return terms.vf(t0, y0, args)


_TSIT5_SOLVER = diffrax.Tsit5()
_TSIT5 = _TSIT5_SOLVER.tableau


def tsit5_step(terms, t0, h, y0, f0, args):
    """One step of Diffrax's Tsit5 (Tsitouras 2011) with Hairer's stiffness estimate;
    returns (y1, f(y1), error estimate, h ρ, stages h·kᵢ stacked).

    Tsit5's sixth and seventh stages are both at t0 + h (c₆ = c₇ = 1) and the seventh
    is at the solution (first same as last), so their difference measures the
    Jacobian for free: h ρ ≈ ‖h k₇ − h k₆‖ / ‖y₇ − y₆‖, counted only when the
    difference decays ((k₇ − k₆)·(y₇ − y₆) < 0; a growing mode is no stiffness). The
    sixth stage's point y₆ = y₀ + Σⱼ a₆ⱼ h kⱼ is rebuilt from the stages.
    """
    y1, y_error, dense, (_, f1), _ = _TSIT5_SOLVER.step(
        terms, t0, t0 + h, y0, args, (False, f0), False
    )
    ks = dense["k"]  # [7, *leaf] per leaf: h kᵢ
    dtype = jax.tree.leaves(y0)[0].dtype
    a6 = np.zeros(7)
    a6[: len(_TSIT5.a_lower[4])] = _TSIT5.a_lower[4]
    a6 = jnp.asarray(a6, dtype)
    dy = jax.tree.map(
        lambda x1, x, k: x1 - x - jnp.tensordot(a6, k, axes=1), y1, y0, ks
    )
    dk = jax.tree.map(lambda k: k[6] - k[5], ks)  # h (k₇ − k₆)
    ndy = tree_norm(dy)
    # only a decaying direction (dk·dy < 0) is stiffness; growth is accuracy-limited
    dot = sum(jnp.vdot(a, b) for a, b in zip(jax.tree.leaves(dk), jax.tree.leaves(dy)))
    ok = (ndy > 0) & (dot < 0)
    h_rho = jnp.where(ok, tree_norm(dk) / jnp.where(ok, ndy, 1.0), 0.0)
    return y1, f1, y_error, h_rho, ks


def hermite_stages(h, y0, y1, f0, f1):
    """Seven stage vectors k for which Tsit5's quartic dense output is the cubic
    Hermite polynomial through (y0, h f0) and (y1, h f1).

    The output is y0 + Σᵢ bᵢ(θ) kᵢ with bᵢ quartics without constant term: the
    coefficient matrix P (θ¹…θ⁴ × 7 stages) has rank 4, so k = P⁺ C matches the
    Hermite coefficients C = (h f0, 3Δ − 2h f0 − h f1, h f0 + h f1 − 2Δ, 0),
    Δ = y1 − y0.
    """
    dtype = jax.tree.leaves(y0)[0].dtype
    theta = jnp.arange(1, 5, dtype=dtype) / 4
    unit = diffrax.Tsit5.interpolation_cls(
        t0=jnp.zeros((), dtype),
        t1=jnp.ones((), dtype),
        y0=jnp.zeros(7, dtype),
        y1=jnp.zeros(7, dtype),
        k=jnp.eye(7, dtype=dtype),
    )
    b = jax.vmap(unit.evaluate)(theta)  # [4 θ, 7]: bᵢ(θ)
    powers = theta[:, None] ** jnp.arange(1, 5, dtype=dtype)  # [4 θ, 4 powers]
    P = jnp.linalg.solve(powers, b)  # [4 powers, 7]
    M = jnp.linalg.pinv(P)  # [7, 4]

    def leaf(a0, a1, g0, g1):
        k0, k1, d = h * g0, h * g1, a1 - a0
        C = jnp.stack([k0, 3 * d - 2 * k0 - k1, k0 + k1 - 2 * d])  # [3, *leaf]
        return jnp.tensordot(M[:, :3], C, axes=1)  # [7, *leaf]

    return jax.tree.map(leaf, y0, y1, f0, f1)
