"""The stiffness-aware default: Tsit5 steps while the flow is not stiff; once Tsit5's
steps are limited by stability, whichever of two stiff methods is cheaper on this
flow, exponential Rosenbrock (EXPRB32) or Runge-Kutta-Chebyshev with the outlying
eigendirections split off (SplitRKC2; plain RKC2 by ``chebyshev=RKC2()``).

Stiffness is detected for free, from Tsit5's own stages (Hairer, Nørsett & Wanner,
Solving ODEs I §II.4, as in Hairer's DOPRI5 code): the last two stages are both
evaluated at t0 + h, at the points y₆ (the sixth stage) and y₇ = y₁ (the solution), so

    h ρ ≈ h ‖f(y₇) − f(y₆)‖ / ‖y₇ − y₆‖

estimates h times the Jacobian's spectral radius. While it stays below ``switch_on``
(Tsit5's real stability interval ends near 3.3) the solver is Tsit5 at Tsit5's cost:
six evaluations a step, no Jacobian-vector product. Once it reaches ``switch_on`` the
next step is a stiff step.

Which stiff method is cheaper depends on the spectrum, and is measured, not guessed:

- EXPRB32 costs 2 + 2(m + m₂) = 18 evaluations a step however large h ρ is, and
  integrates the linearisation exactly. It wins where a few isolated eigenvalues are
  stiff and the linearisation holds over a step (the one-layer Markov flow).
- SplitRKC2 costs about √(1.54·1.5 h λ₂) + 7 evaluations a step (RKC2's Chebyshev
  stages for the band below the top eigenvalue λ₁, which exponential half steps
  take apart, and the products of its subspace iteration), whatever the width of
  the stiff band. It wins where many eigenvalues are stiff and the Jacobian changes
  within a step, so the exponential steps' error holds them far below their
  stability (a LayerNorm block whose input scale collapses: docs/integrators.md,
  "The standard block's spectrum"; there λ₁ sits 40-57× above λ₂, and splitting it
  off made the default 2.5× cheaper than with plain RKC2 at t = 4).

The stiff phase starts with the method that won last (EXPRB32 at first). After
``race_every`` accepted stiff steps the other method takes a trial of
``probation + race_steps`` steps; the cost of each, evaluations per unit of flow time
averaged over its last steps (after the ``probation`` steps that let the step-size
controller adapt to it), decides which continues. A trial the incumbent wins doubles
the gap to the next one (at most ``race_every_max``), so a flow whose best method does
not change pays a few trials in all.

Stiff steps hand back to Tsit5 where Tsit5 is cheaper: Tsit5 at its stability limit
pays about 6/(3.3/ρ) ≈ 1.8 ρ evaluations per unit time, i.e. 1.8 h ρ for a step h, so a
stiff step of ``e`` evaluations hands over when e > (18 / ``switch_off``)·h ρ (for
EXPRB32: h ρ < ``switch_off`` = 10). ρ is kept sticky in the stiff phase (5 % decay a
step), since Lanczos and power iteration on f miss the stiff end once f has no
component along it. A switch into the stiff phase waits ``cooldown`` accepted Tsit5
steps after the last switch back, and every switch of method keeps at least
``probation`` steps. One PID controller drives all three; the stiff methods' error
estimates are multiplied first by ``stiff_error_scale`` (EXPRB32) and
``chebyshev_error_scale`` (the Chebyshev method), which calibrate their global
errors to Tsit5's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PyTree, Real

from gflow.dynamics.solvers.exprb import EXPRB32, exprb32_step
from gflow.dynamics.solvers.rkc import (
    RKC2,
    RKCState,
    num_stages,
    power_iteration,
    start_vector,
)
from gflow.dynamics.solvers.split import (
    SplitRKC2,
    SplitStep,
    split_rkc2_step,
    subspace_iterations,
)
from gflow.dynamics.tree import tree_norm, tree_scale

TSIT5, EXPONENTIAL, CHEBYSHEV = 0, 1, 2


class AutoState(eqx.Module):
    """What AutoSwitch carries between (accepted) steps."""

    f0: PyTree  # the vector field at the step's start (first same as last)
    rho: Float[Array, ""]  # spectral radius: Hairer's estimate, Lanczos's or power's
    num_evals: Int[Array, ""]  # vector-field evaluations in accepted steps (JVPs: 2)
    method: Int[Array, ""]  # the next step's method: TSIT5, EXPONENTIAL or CHEBYSHEV
    steps_in_mode: Int[Array, ""]  # accepted steps since the last switch
    num_switches: Int[Array, ""]  # how often the method changed, any way
    v: PyTree  # RKC2's power-iteration vector, unit norm
    basis: Float[Array, "k1 n"]  # SplitRKC2's subspace (flat rows; unused by RKC2)
    band: Float[Array, ""]  # SplitRKC2's spectral radius of its slow step (sticky)
    incumbent: Int[Array, ""]  # the stiff method that won the last trial
    trial: Bool[Array, ""]  # the current stiff method is on trial
    tried_other: Bool[Array, ""]  # a trial ran in this stiff phase
    since_race: Int[Array, ""]  # accepted stiff steps since the last trial ended
    race_gap: Int[Array, ""]  # stiff steps between trials (doubles on a kept win)
    cost_evals: Float[Array, "2"]  # per stiff method: average evaluations a step
    cost_h: Float[Array, "2"]  # per stiff method: average step size

    @property
    def stiff(self) -> Bool[Array, ""]:
        """The next step is a stiff step (EXPRB32 or the Chebyshev method)."""
        return self.method != TSIT5


class AutoSwitch(diffrax.AbstractSolver):
    """Tsit5 until its own stages say the flow is stiff, then the cheaper of EXPRB32
    and SplitRKC2 as measured on the flow (and back to Tsit5 where it is cheaper).

    The defaults were chosen on the default Markov flow and on the standard
    Transformer block of issue 31 (docs/integrators.md): on the Markov flow to
    t = 3000 at rtol 1e-6 it ends closer to a Dopri8 reference than Tsit5 with far
    fewer gradient evaluations (EXPRB32 wins its trials), and to t = 400 it costs about
    Tsit5's; on the LayerNorm block the Chebyshev method wins and carries the flow
    through the stiffening that stalls EXPRB32 and Tsit5.

    Attributes:
        stiff: the exponential solver (its Krylov dimensions).
        chebyshev: the Runge-Kutta-Chebyshev solver: SplitRKC2 (its outliers, its
            safety on the band's ρ, its stage limit) or plain RKC2 (its safety on
            ρ, its stage limit, its power iterations per step).
        switch_on: Hairer's h ρ from Tsit5's stages at which a stiff method takes
            over (Tsit5's real stability interval ends near 3.3).
        switch_off: h ρ below which an EXPRB32 step costs more than Tsit5 at its
            stability limit (18/1.8 = 10); RKC2 steps use the same rate, 1.8 h ρ
            evaluations for Tsit5, against their own cost.
        cooldown: accepted Tsit5 steps after a switch back before a stiff method may
            be tried again.
        probation: accepted steps a method keeps after any switch (the controller
            adapts the step to it meanwhile; a trial's cost is measured after them).
        race_every: accepted stiff steps before the first trial of the other stiff
            method; doubled each time the incumbent keeps its place.
        race_every_max: the largest gap between trials.
        race_steps: steps of a trial whose cost is measured (after ``probation``).
        trial_stages: the most stages of RKC2's first step after a switch; a
            first step that needs more is refused before its stages are computed
            (the controller then shrinks h at the cost of the power iteration).
        stiff_error_scale: factor on EXPRB32's error estimate before the controller
            sees it.
        chebyshev_error_scale: factor on the Chebyshev method's error estimate
            (second order; its embedded estimate understates its global error).
            None: 30 for SplitRKC2, 10 for RKC2. With 10, SplitRKC2 let the
            default Markov flow to t = 3000 end 7.2e-6 from the Dopri8 reference,
            above Tsit5's 3.1e-6; with 30 at 2.0e-6 for 19 640 evaluations (plain
            RKC2 at 10: 2.1e-6 for 21 811).
    """

    stiff: EXPRB32 = EXPRB32()
    chebyshev: RKC2 | SplitRKC2 = SplitRKC2()
    switch_on: float = 2.5
    switch_off: float = 10.0
    cooldown: int = 200
    probation: int = 3
    race_every: int = 32
    race_every_max: int = 1024
    race_steps: int = 8
    trial_stages: int = 32
    stiff_error_scale: float = 1.0
    chebyshev_error_scale: float | None = None

    @property
    def method_names(self) -> tuple[str, ...]:
        """The methods of its steps, as ``method_in_use`` numbers them."""
        return ("Tsit5", "EXPRB32", type(self.chebyshev).__name__)

    term_structure: ClassVar = diffrax.AbstractTerm
    # Tsit5's quartic dense output; a stiff step fills its stages so that the
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
        if self.trial_stages < 2:
            raise ValueError(f"trial_stages must be >= 2, got {self.trial_stages}")
        if not 1 <= self.race_every <= self.race_every_max or self.race_steps < 1:
            raise ValueError(
                "need 1 <= race_every <= race_every_max and race_steps >= 1, got "
                f"{self.race_every}, {self.race_every_max}, {self.race_steps}"
            )
        if not (self.stiff_error_scale > 0 and self.chebyshev_scale > 0):
            raise ValueError(
                "stiff_error_scale and chebyshev_error_scale must be > 0, got "
                f"{self.stiff_error_scale}, {self.chebyshev_error_scale}"
            )

    @property
    def chebyshev_scale(self) -> float:
        """The factor on the Chebyshev method's error estimate in use."""
        if self.chebyshev_error_scale is not None:
            return self.chebyshev_error_scale
        return 30.0 if isinstance(self.chebyshev, SplitRKC2) else 10.0

    def method_in_use(self, state: AutoState, h: Real[ArrayLike, ""]) -> Int[Array, ""]:
        """0 (Tsit5), 1 (EXPRB32) or 2 (the Chebyshev method): the next step's."""
        return state.method

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
        dtype = jax.tree.leaves(y0)[0].dtype
        x0 = ravel_pytree(y0)[0]
        k1 = (
            min(self.chebyshev.outliers + 1, x0.size)
            if isinstance(self.chebyshev, SplitRKC2)
            else 1
        )
        start = jax.random.normal(jax.random.key(0), (k1, x0.size), x0.dtype)
        return AutoState(
            f0=terms.vf(t0, y0, args),
            rho=jnp.zeros((), dtype),
            num_evals=jnp.ones((), jnp.int32),
            method=jnp.asarray(TSIT5, jnp.int32),
            steps_in_mode=jnp.asarray(self.cooldown, jnp.int32),  # may switch at once
            num_switches=jnp.zeros((), jnp.int32),
            v=start_vector(y0),
            basis=jnp.linalg.qr(start.T)[0].T,
            band=jnp.zeros((), dtype),
            incumbent=jnp.asarray(EXPONENTIAL, jnp.int32),
            trial=jnp.zeros((), bool),
            tried_other=jnp.zeros((), bool),
            since_race=jnp.zeros((), jnp.int32),
            race_gap=jnp.asarray(self.race_every, jnp.int32),
            cost_evals=jnp.zeros(2, dtype),
            cost_h=jnp.zeros(2, dtype),
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
        evals_int = jnp.int32

        def explicit():
            y1, f1, y_error, h_rho, ks = tsit5_step(terms, t0, h, y0, f0, args)
            evals = jnp.asarray(6, evals_int)
            return y1, f1, y_error, h_rho, evals, ks, st.v, st.basis, st.band

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
            evals = jnp.asarray(self.stiff.evals_per_step, evals_int)
            return y1, f1, y_error, h * rho, evals, ks, st.v, st.basis, st.band

        def chebyshev():
            # power iteration warm-started from the last vector; on entering RKC2
            # (no accepted step since the switch) the vector is stale, so it takes
            # more products (and ρ is sticky)
            entering = st.steps_in_mode == 0
            iters = jnp.where(
                entering,
                self.chebyshev.init_power_iters // 3,
                self.chebyshev.power_iters,
            )
            v, rho = power_iteration(terms, t0, y0, args, st.v, iters)
            rho = jnp.maximum(rho, 0.95 * st.rho)
            tracked = RKCState(
                f0=f0,
                v=v,
                rho=rho,
                num_evals=jnp.zeros((), evals_int),
                max_stages=jnp.zeros((), evals_int),
            )
            # entering at the exponential steps' size can need hundreds of stages,
            # and such a step is mostly rejected: refuse it before its stages are
            # computed (infinite error), so the controller shrinks h for the cost
            # of the power iteration alone
            s = num_stages(h * self.chebyshev.safety * rho)

            def stages():
                y1, y_error, _, new, _ = self.chebyshev.advance(
                    terms, t0, t1, y0, args, tracked
                )
                return (
                    y1,
                    new.f0,
                    tree_scale(self.chebyshev_scale, y_error),
                    new.num_evals,
                )

            def refused():
                inf = jax.tree.map(lambda x: jnp.full_like(x, jnp.inf), y0)
                return y0, f0, inf, jnp.zeros((), evals_int)

            y1, f1, y_error, stage_evals = jax.lax.cond(
                entering & (s > self.trial_stages), refused, stages
            )
            ks = hermite_stages(h, y0, y1, f0, f1)
            evals = stage_evals + 2 * iters
            return y1, f1, y_error, h * rho, evals, ks, v, st.basis, st.band

        def split_chebyshev():
            # one subspace iteration warm-started from the last basis. On entering
            # (no accepted step since the switch) the basis and the band were
            # computed at y0 by the step that chose the switch (``_enter_split``),
            # so a first step whose stages would exceed trial_stages is refused
            # before any evaluation: the controller shrinks h for free, where a
            # subspace iteration in each refused attempt cost 40 evaluations
            x0, unravel = ravel_pytree(y0)
            fx0 = ravel_pytree(f0)[0]
            cheb = self.chebyshev
            entering = st.steps_in_mode == 0

            def field(x, t):
                return ravel_pytree(terms.vf(t, unravel(x), args))[0]

            def attempt():
                return split_rkc2_step(
                    field,
                    t0,
                    h,
                    x0,
                    fx0,
                    st.basis,
                    st.band,
                    safety=cheb.safety,
                    max_stages=cheb.max_stages,
                    refuse_above=jnp.where(
                        entering, self.trial_stages, cheb.max_stages
                    ),
                )

            def refuse():
                return SplitStep(
                    x1=x0,
                    f1=fx0,
                    error=jnp.full_like(x0, jnp.inf),
                    ritz=jnp.zeros(st.basis.shape[0], x0.dtype),
                    basis=st.basis,
                    band=st.band,
                    stages=jnp.zeros((), evals_int),
                    evals=jnp.zeros((), evals_int),
                )

            too_many = num_stages(h * cheb.safety * st.band) > self.trial_stages
            out = jax.lax.cond(entering & too_many, refuse, attempt)
            y1, f1 = unravel(out.x1), unravel(out.f1)
            y_error = tree_scale(self.chebyshev_scale, unravel(out.error))
            ks = hermite_stages(h, y0, y1, f0, f1)
            rho = jnp.maximum(out.ritz[0], 0.95 * st.rho)
            return y1, f1, y_error, h * rho, out.evals, ks, st.v, out.basis, out.band

        split = isinstance(self.chebyshev, SplitRKC2)
        y1, f1, y_error, h_rho, evals, ks, v, basis, band = jax.lax.switch(
            st.method, (explicit, exponential, split_chebyshev if split else chebyshev)
        )
        new = self._next_state(st, h, h_rho, evals, jumped)
        if split:
            basis, band, more = self._enter_split(
                terms, t1, y1, args, st, new, basis, band
            )
            new = eqx.tree_at(lambda s: s.num_evals, new, new.num_evals + more)
        new = eqx.tree_at(
            lambda s: (s.f0, s.v, s.basis, s.band), new, (f1, v, basis, band)
        )
        dense_info = dict(y0=y0, y1=y1, k=ks)
        return y1, y_error, dense_info, new, diffrax.RESULTS.successful

    def _enter_split(self, terms, t1, y1, args, st, new, basis, band):
        """(basis, band, evaluations) for the next step: where this step switches
        the flow into SplitRKC2, ``init_iters // 3`` subspace iterations at y₁ from
        the last basis (stale since the last SplitRKC2 step), so that the first
        SplitRKC2 step knows its band before it spends an evaluation; else the
        step's own basis and band, for no evaluations."""
        cheb = self.chebyshev
        iters = max(cheb.init_iters // 3, 1)

        def prepare():
            x1, unravel = ravel_pytree(y1)

            def field(x, t):
                return ravel_pytree(terms.vf(t, unravel(x), args))[0]

            ritz, fresh = subspace_iterations(field, t1, x1, basis, iters)
            sticky = jnp.maximum(jnp.maximum(ritz[-1], 0.0), 0.95 * band)
            return fresh, sticky, jnp.asarray(2 * basis.shape[0] * iters, jnp.int32)

        def keep():
            return basis, band, jnp.zeros((), jnp.int32)

        switching_in = (new.method == CHEBYSHEV) & (st.method != CHEBYSHEV)
        return jax.lax.cond(switching_in, prepare, keep)

    def _next_state(self, st, h, h_rho, evals, jumped) -> AutoState:
        """The method of the next step, the trials and their costs, after an
        accepted step of ``evals`` evaluations at h ρ = ``h_rho``."""
        i32 = jnp.int32
        dtype = st.cost_h.dtype
        stiff_now = st.method != TSIT5
        # Lanczos and power iteration on f miss the stiff end once f has no
        # component along it: keep the estimate sticky in the stiff phase,
        # forgetting 5% a step, so that leaving it needs the spectrum to shrink
        h_rho = jnp.where(stiff_now, jnp.maximum(h_rho, 0.95 * h * st.rho), h_rho)
        rho = jnp.where(h > 0, h_rho / jnp.where(h > 0, h, 1.0), 0.0)
        settled = st.steps_in_mode >= jnp.where(
            stiff_now, self.probation, self.cooldown
        )

        # the cost of the current stiff method, evaluations per unit time:
        # averages over its settled steps (weight 1/4 on the newest; the first
        # settled step starts them)
        slot = jnp.clip(st.method - 1, 0, 1)
        measured = stiff_now & settled
        w = jnp.where(st.steps_in_mode == self.probation, 1.0, 0.25).astype(dtype)
        e_new = (1 - w) * st.cost_evals[slot] + w * evals.astype(dtype)
        h_new = (1 - w) * st.cost_h[slot] + w * h
        cost_evals = jnp.where(
            measured, st.cost_evals.at[slot].set(e_new), st.cost_evals
        )
        cost_h = jnp.where(measured, st.cost_h.at[slot].set(h_new), st.cost_h)
        rate = cost_evals / jnp.where(cost_h > 0, cost_h, 1.0)
        # Tsit5 at its stability limit: about (18 / switch_off) ρ per unit time
        tsit5_rate = (self.stiff.evals_per_step / self.switch_off) * rho

        # a trial of the other stiff method: after race_gap stiff steps, or when
        # the current one has become dearer than Tsit5 and the other has not been
        # tried in this stiff phase; it runs probation + race_steps steps and the
        # cheaper of the two continues
        other = jnp.asarray(EXPONENTIAL + CHEBYSHEV, i32) - st.method
        dearer = measured & (rate[slot] > tsit5_rate)
        due = (
            measured
            & ~st.trial
            & ((st.since_race >= st.race_gap) | (dearer & ~st.tried_other))
        )
        done = (
            stiff_now
            & st.trial
            & (st.steps_in_mode + 1 >= self.probation + self.race_steps)
        )
        trial_wins = rate[slot] < rate[jnp.clip(st.incumbent - 1, 0, 1)]
        incumbent = jnp.where(done & trial_wins, st.method, st.incumbent)
        race_gap = jnp.where(
            done,
            jnp.where(
                trial_wins,
                self.race_every,
                jnp.minimum(2 * st.race_gap, self.race_every_max),
            ),
            st.race_gap,
        )
        after_race = jnp.where(due, other, jnp.where(done, incumbent, st.method))

        # out of the stiff phase once Tsit5 is cheaper than the current method and
        # no trial is pending; into it at Tsit5's stability limit
        leave = dearer & ~st.trial & ~due
        enter = ~stiff_now & settled & (h_rho >= self.switch_on)
        method = jnp.where(leave, TSIT5, jnp.where(enter, incumbent, after_race))
        method = method.astype(i32)
        trial = jnp.where(leave | done, False, jnp.where(due, True, st.trial))
        tried_other = jnp.where(enter, False, st.tried_other | due)
        since_race = jnp.where(done | leave, 0, st.since_race + stiff_now.astype(i32))
        changed = method != st.method
        return AutoState(
            f0=st.f0,
            rho=rho,
            num_evals=st.num_evals + jumped + evals,
            method=method,
            steps_in_mode=jnp.where(changed, 0, st.steps_in_mode + 1),
            num_switches=st.num_switches + changed,
            v=st.v,
            basis=st.basis,
            band=st.band,
            incumbent=incumbent,
            trial=trial,
            tried_other=tried_other,
            since_race=since_race,
            race_gap=race_gap,
            cost_evals=cost_evals,
            cost_h=cost_h,
        )

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
