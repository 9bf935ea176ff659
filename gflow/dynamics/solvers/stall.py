"""Why a solve stalled: where it stopped, how small its step got, the Hessian's top
eigenvalues there, and which option to try.

A gradient flow's Jacobian is −H. An explicit method (Tsit5) is stable only while
h λ_max(H) stays below about 3.3, so when λ_max grows its steps shrink to 3.3/λ_max
whatever the tolerance, and the step budget runs out: ``h · λ_max`` near that limit
says the step is limited by stability (use a stiff method), far below it says the step
is limited by accuracy (a looser rtol, a larger max_steps) or by a singularity of the
flow (a step that keeps shrinking while λ_max does not grow: a blow-up or a
non-smooth loss). The eigenvalues come from ``iters`` Lanczos steps on
Hessian-vector products at the last state (``hessian_top``); Lanczos finds the
extreme ones first, and each comes with its residual bound ‖H v − θ v‖.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from gflow.dynamics.solvers.exprb import lanczos

#: Tsit5's stability limit on the negative real axis, h λ_max.
EXPLICIT_LIMIT = 3.3

#: Solvers built for stiff flows; any other solver is taken as explicit.
STIFF_SOLVERS = frozenset(
    {"AutoSwitch", "StiffSwitch", "RKC2", "SplitRKC2", "ROCK4", "EXPRB32"}
)


def hessian_top(
    matvec: Callable[[Float[Array, " n"]], Float[Array, " n"]],
    v0: Float[Array, " n"],
    iters: int,
) -> tuple[Float[Array, " k"], Float[Array, " k"]]:
    """Ritz values of a symmetric operator, descending, and their residual bounds.

    Args:
        matvec: v ↦ H v on flat vectors [n].
        v0: start vector [n] (not zero).
        iters: Lanczos steps k (≤ n).

    Returns:
        (θ [k] descending, bounds [k]): ‖H y − θ y‖ = β_k |s_k| for each Ritz pair
        (y, θ), so every θ lies within its bound of an eigenvalue of H.
    """
    _, alpha, beta, _, _ = lanczos(matvec, v0, iters)
    T = jnp.diag(alpha) + jnp.diag(beta[:-1], 1) + jnp.diag(beta[:-1], -1)
    theta, S = jnp.linalg.eigh(T)
    bounds = jnp.abs(beta[-1] * S[-1])
    return theta[::-1], bounds[::-1]


@dataclasses.dataclass(frozen=True)
class StallReport:
    """What a solve that did not reach t1 says about where and why.

    Attributes:
        status: the Trajectory's status (``"max_steps"``, ``"failed"``, ...).
        solver: the solver's class name; method: the method of its last step.
        t0, t1: the solve's interval; t_reached: where it stopped.
        steps, rejected, max_steps, grad_evals: the solver's counts.
        last_step: the last attempted step h (None when the solver was not watched).
        smallest_step: the smallest attempted step (the one cut to end at t1 aside).
        eigenvalues: top Ritz values of the Hessian at the last state, descending.
        bounds: their residual bounds (each lies this close to an eigenvalue).
        lanczos_iters: Hessian-vector products spent on them.
        solver_rho: the solver's own spectral-radius estimate at the end, if any.
        suggestions: the options to try, most likely first.
    """

    status: str
    solver: str
    method: str
    t0: float
    t1: float
    t_reached: float
    steps: int
    rejected: int
    max_steps: int
    grad_evals: int | None
    last_step: float | None
    smallest_step: float | None
    eigenvalues: tuple[float, ...]
    bounds: tuple[float, ...]
    lanczos_iters: int
    solver_rho: float | None
    suggestions: tuple[str, ...]

    @property
    def lambda_max(self) -> float:
        """The largest Ritz value: λ_max(H) at the last state, from below."""
        return self.eigenvalues[0] if self.eigenvalues else math.nan

    @property
    def stiffness(self) -> float | None:
        """h · λ_max at the last step (Tsit5 is stable below about 3.3)."""
        if self.last_step is None or not math.isfinite(self.last_step):
            return None
        return self.last_step * self.lambda_max

    def num_stiff(self, factor: float = 10.0) -> int:
        """Ritz values within ``factor`` of λ_max (the stiff cluster's size, from
        the converged end of the spectrum; at most ``lanczos_iters``)."""
        lam = self.lambda_max
        if not lam > 0:
            return 0
        return sum(1 for x in self.eigenvalues if x >= lam / factor)

    @property
    def message(self) -> str:
        """The report in a few lines, ending with the options to try."""
        why = {"max_steps": f"ran out of max_steps = {self.max_steps:,}"}.get(
            self.status, f"ended {self.status}"
        )
        lines = [
            f"the flow stopped at t = {self.t_reached:.6g} of [{self.t0:g}, "
            f"{self.t1:g}]: {self.solver} ({self.method} at the end) {why} after "
            f"{self.steps:,} steps ({self.rejected:,} rejected"
            + (
                f", {self.grad_evals:,} gradient evaluations)"
                if self.grad_evals
                else ")"
            )
        ]
        if self.last_step is not None:
            lines.append(
                f"step size: last {self.last_step:.3g}, "
                f"smallest {self.smallest_step:.3g}"
            )
        top = ", ".join(f"{x:.4g}" for x in self.eigenvalues[:5])
        line = (
            f"Hessian's top eigenvalues at t = {self.t_reached:.6g}: {top} (Lanczos, "
            f"{self.lanczos_iters} Hessian-vector products)"
        )
        if self.stiffness is not None:
            line += f"; h·λ_max = {self.stiffness:.3g}"
        if self.solver_rho is not None:
            line += f"; the solver's ρ estimate {self.solver_rho:.4g}"
        lines.append(line)
        lines += [f"try: {s}" for s in self.suggestions]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.message


def suggest(report: StallReport) -> tuple[str, ...]:
    """The options worth trying for ``report``, most likely first."""
    out = []
    hl = report.stiffness
    stiff_solver = report.solver in STIFF_SOLVERS
    lam = report.lambda_max
    if hl is not None and hl >= 1.0 and not stiff_solver:
        out.append(
            f"a stiff method: the steps are limited by stability (h·λ_max = {hl:.3g}, "
            f"Tsit5 is stable below {EXPLICIT_LIMIT}): solver=AutoSwitch() (the "
            "default; exponential or Chebyshev steps, whichever is cheaper on the "
            "flow) or RKC2() (a wide stiff spectrum)"
        )
    if stiff_solver and report.method == "Tsit5" and hl is not None and hl >= 1.0:
        out.append(
            f"a solver that stays stiff: {report.solver} ended on explicit Tsit5 "
            f"steps at their stability limit (h·λ_max = {hl:.3g}); solver=EXPRB32() "
            "(exponential steps throughout) or RKC2()"
        )
    if (
        stiff_solver
        and report.method in ("EXPRB32", "Tsit5")
        and report.num_stiff() > 4
    ):
        out.append(
            f"solver=RKC2(): {report.num_stiff()} eigenvalues lie within 10× of "
            f"λ_max = {lam:.4g}; RKC2's step costs √(1.54 h ρ) evaluations however "
            "many are stiff, while exponential steps need a Krylov space that holds "
            "them all"
        )
    ev = report.eigenvalues
    if (
        report.method in ("RKC2", "StiffSwitch")
        and len(ev) > 1
        and ev[1] > 0
        and ev[0] > 10 * ev[1]
    ):
        out.append(
            f"solver=SplitRKC2(): λ_max = {ev[0]:.4g} sits {ev[0] / ev[1]:.0f}× "
            f"above the next eigenvalue ({ev[1]:.4g}); RKC2's stages pay for λ_max, "
            "SplitRKC2's only for the next one, as it takes the top direction "
            "apart (the default's Chebyshev method)"
        )
    if report.status == "max_steps" and report.last_step:
        remaining = max(report.t1 - report.t_reached, 0.0)
        need = report.steps + math.ceil(remaining / report.last_step)
        out.append(
            f"a larger max_steps: at the last step size, t1 = {report.t1:g} needs "
            f"about {need:,} steps (max_steps={need:,} or more)"
        )
    if hl is not None and hl < 1.0:
        out.append(
            f"a looser rtol: the step is limited by accuracy (h·λ_max = {hl:.3g}); "
            "an explicit step of order p grows as rtol^(1/p)"
        )
        if report.last_step < 1e-8 * max(1.0, abs(report.t_reached)):
            out.append(
                "check the flow near this t: the step collapsed without stiffness, "
                "as at a finite-time blow-up or a non-smooth loss (is the loss "
                "falling without bound? is λ_min very negative?)"
            )
    elif hl is None:
        out.append("a looser rtol or a larger max_steps")
    return tuple(out)


def stall_report(
    *,
    matvec: Callable[[Float[Array, " n"]], Float[Array, " n"]],
    n: int,
    dtype,
    iters: int = 30,
    **fields,
) -> StallReport:
    """A ``StallReport`` from the solve's counts (``fields``) and ``iters`` Lanczos
    steps of ``matvec`` (v ↦ H v at the last state, on flat vectors [n])."""
    iters = max(1, min(iters, n))
    v0 = jax.random.normal(jax.random.key(0), (n,), dtype)
    theta, bounds = jax.jit(hessian_top, static_argnums=(0, 2))(matvec, v0, iters)
    base = StallReport(
        eigenvalues=tuple(float(x) for x in np.asarray(theta)),
        bounds=tuple(float(x) for x in np.asarray(bounds)),
        lanczos_iters=iters,
        suggestions=(),
        **fields,
    )
    return dataclasses.replace(base, suggestions=suggest(base))
