"""Automatic stiffness switching: an explicit Runge-Kutta step while it is stable,
an RKC2 step once the step the accuracy allows would leave its stability region.

A gradient flow is non-stiff early (a high-order method such as Tsit5 takes large,
accuracy-limited steps) and stiff late (λ_max of the Hessian grows while the slow
directions crawl). The switch reads the tracked spectral radius ρ of RKC2 at every
step: if h ρ lies inside the explicit method's real stability interval, it takes the
explicit step (high order, accurate), otherwise an RKC2 step with √(1.54 h ρ) stages.
Both report an error estimate, so one PIDController drives the whole solve.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Int, PyTree, Real

from gflow.dynamics.solvers.rkc import RKC2, RKCState
from gflow.dynamics.tree import tree_scale


class StiffSwitch(diffrax.AbstractSolver):
    """Tsit5 (or another explicit FSAL Runge-Kutta solver) until stiff, then RKC2.

    Attributes:
        explicit: the non-stiff solver; an explicit, first-same-as-last Runge-Kutta
            method from Diffrax (Tsit5, Dopri5, Dopri8, Bosh3).
        stiff: the stabilised solver taking over when h ρ > ``stability``.
        stability: the explicit method's stability limit on the negative real axis,
            h ρ (Tsit5 ≈ 3.4; kept below it for a margin).
        stiff_error_scale: RKC2's error estimate is multiplied by this before the
            step-size controller sees it, i.e. RKC2 steps run at tolerances this
            many times tighter than the explicit ones. The default 100 calibrates
            the two: with 1, StiffSwitch at rtol 1e-6 ended 5.0e-5 from the
            reference at t = 3000 against Tsit5's 3.1e-6; with 100, 2.4e-7, at
            about 16× less wall time than Tsit5 (BENCHMARKS.md).
    """

    explicit: diffrax.AbstractSolver = diffrax.Tsit5()
    stiff: RKC2 = RKC2()
    stability: float = 2.5
    stiff_error_scale: float = 100.0

    #: the methods of its steps, as ``method_in_use`` numbers them
    method_names: ClassVar[tuple[str, ...]] = ("Tsit5", "RKC2")

    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar[Callable] = (
        diffrax.ThirdOrderHermitePolynomialInterpolation
    )

    def __check_init__(self):
        tableau = getattr(self.explicit, "tableau", None)
        if tableau is None or tableau.implicit or not tableau.fsal:
            raise ValueError(
                "explicit must be an explicit FSAL Runge-Kutta solver such as "
                f"diffrax.Tsit5(), got {type(self.explicit).__name__}"
            )
        if not self.stability > 0:
            raise ValueError(f"stability must be > 0, got {self.stability}")
        if not self.stiff_error_scale > 0:
            raise ValueError(
                f"stiff_error_scale must be > 0, got {self.stiff_error_scale}"
            )

    @property
    def explicit_evals(self) -> int:
        return self.explicit.tableau.num_stages - 1

    def method_in_use(self, state: RKCState, h: Real[ArrayLike, ""]) -> Int[Array, ""]:
        """0 (explicit) or 1 (RKC2) for a step h from ``state`` (ρ before this
        step's power iteration updates it)."""
        return (h * self.stiff.safety * state.rho > self.stability).astype(jnp.int32)

    def order(self, terms: PyTree[diffrax.AbstractTerm]) -> int:
        return self.stiff.order(terms)

    def init(
        self,
        terms: PyTree[diffrax.AbstractTerm],
        t0: Real[ArrayLike, ""],
        t1: Real[ArrayLike, ""],
        y0: PyTree,
        args: PyTree,
    ) -> RKCState:
        return self.stiff.init(terms, t0, t1, y0, args)

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
        tracked = self.stiff.track(terms, t0, y0, args, solver_state, made_jump)
        h = t1 - t0
        use_stiff = h * self.stiff.safety * tracked.rho > self.stability

        def explicit():
            y1, y_error, _, (_, f1), result = self.explicit.step(
                terms, t0, t1, y0, args, (False, tracked.f0), False
            )
            new = eqx.tree_at(
                lambda s: (s.f0, s.num_evals),
                tracked,
                (f1, tracked.num_evals + self.explicit_evals),
            )
            return y1, y_error, new, result

        def stiff():
            y1, y_error, _, new, result = self.stiff.advance(
                terms, t0, t1, y0, args, tracked
            )
            return y1, tree_scale(self.stiff_error_scale, y_error), new, result

        y1, y_error, new_state, result = jax.lax.cond(use_stiff, stiff, explicit)
        dense_info = dict(
            y0=y0, y1=y1, k0=tree_scale(h, tracked.f0), k1=tree_scale(h, new_state.f0)
        )
        return y1, y_error, dense_info, new_state, result

    def func(
        self,
        terms: PyTree[diffrax.AbstractTerm],
        t0: Real[ArrayLike, ""],
        y0: PyTree,
        args: PyTree,
    ) -> PyTree:
        return terms.vf(t0, y0, args)
