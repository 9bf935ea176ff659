"""ROCK4: a fourth-order stabilised explicit Runge-Kutta solver (Abdulle 2002).

A step of size h with s stages first runs s − 4 stages of a three-term recurrence,
Y_j = h μ_j f(Y_{j−1}) + (1 + κ_j) Y_{j−1} − κ_j Y_{j−2}, whose stability polynomial
is orthogonal with respect to a weight chosen so that the composition with a final
four-stage Runge-Kutta step (the finishing procedure) has order four and a stability
interval along the negative real axis of about 0.35 s². So a step costs about
√(h ρ / 0.35) gradient evaluations, ρ the spectral radius of the Jacobian; for a
gradient flow (Jacobian −H, symmetric, real spectrum) stiffness costs √(h λ_max), and
fourth order lets the accuracy-limited steps of the slow late phase grow long.

The recurrence and finishing coefficients are Abdulle's published tables for the 50
degrees 1…148 (``rock4_coefficients.json``, with its source); the degree is the
smallest tabulated one that covers h ρ. An embedded third-order finishing procedure,
which also uses f(y₁) (first same as last), gives the error estimate. ρ is tracked by
the warm-started power iteration of RKC2 (``gflow.dynamics.solvers.rkc``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import resources
from typing import ClassVar

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Int, PyTree, Real

from gflow.dynamics.solvers.rkc import RKCState, power_iteration, start_vector, track
from gflow.dynamics.tree import tree_scale

_TABLE = json.loads(
    resources.files("gflow.dynamics.solvers")
    .joinpath("rock4_coefficients.json")
    .read_text()
)
#: The tabulated recurrence degrees (s − 4 for s stages).
DEGREES = np.asarray(_TABLE["ms"], np.int32)
#: Where each degree's coefficients start in RECF.
OFFSETS = np.concatenate([[0], np.cumsum(2 * DEGREES - 1)[:-1]]).astype(np.int32)
RECF = np.asarray(_TABLE["recf"])
FPA = np.asarray(_TABLE["fpa"])  # [50, 6]: a21 a31 a32 a41 a42 a43
FPB = np.asarray(_TABLE["fpb"])  # [50, 4]: b1..b4
FPBE = np.asarray(_TABLE["fpbe"])  # [50, 5]: embedded b̂1..b̂5
#: The most stages of one step (148 recurrence stages and 4 finishing ones).
MAX_STAGES = int(DEGREES[-1]) + 4


def stages_needed(h_rho: Real[ArrayLike, "*shape"]) -> Int[Array, "*shape"]:
    """Stages s (before rounding up to a tabulated degree) that make ROCK4 stable
    for h ρ: s = ⌊√((3 + h ρ)/0.353)⌋ + 1, at least 5 (Abdulle's choice)."""
    s = jnp.floor(jnp.sqrt((3.0 + h_rho) / 0.353)).astype(jnp.int32) + 1
    return jnp.maximum(s, 5)


def degree_index(stages: Int[ArrayLike, "*shape"]) -> Int[Array, "*shape"]:
    """Index of the smallest tabulated degree ≥ stages − 4 (clipped to the table)."""
    idx = jnp.searchsorted(jnp.asarray(DEGREES), jnp.asarray(stages) - 4, side="left")
    return jnp.minimum(idx, len(DEGREES) - 1)


class ROCK4(diffrax.AbstractSolver):
    """Fourth-order Orthogonal-Runge-Kutta-Chebyshev (ROCK4) with an embedded error
    estimate, for ODEs whose Jacobian has its spectrum near the negative real axis.

    Use with ``diffrax.PIDController``. Each step uses the fewest tabulated stages
    that keep h·safety·ρ inside the stability interval; a step that would need more
    than 152 stages is rejected at no cost (error ∞) so that the controller shrinks
    it. The state (``RKCState``) counts vector-field evaluations (a JVP counts 2).

    Attributes:
        safety: factor on the power-iteration estimate of ρ (it approaches ρ from
            below).
        power_iters: Jacobian-vector products per step to keep ρ tracked.
        init_power_iters: products at the first step (cold start).
    """

    safety: float = 1.2
    power_iters: int = 1
    init_power_iters: int = 30

    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar[Callable] = (
        diffrax.ThirdOrderHermitePolynomialInterpolation
    )

    def __check_init__(self):
        if not self.safety >= 1.0:
            raise ValueError(f"safety must be >= 1, got {self.safety}")
        if self.power_iters < 1 or self.init_power_iters < 1:
            raise ValueError("power_iters and init_power_iters must be >= 1")

    def order(self, terms: PyTree[diffrax.AbstractTerm]) -> int:
        return 4

    def error_order(self, terms: PyTree[diffrax.AbstractTerm]) -> int:
        return 4  # a third-order embedded solution: local error O(h⁴)

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
        return RKCState(
            f0=terms.vf(t0, y0, args),
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
        tracked = track(terms, t0, y0, args, solver_state, made_jump, self.power_iters)
        return self.advance(terms, t0, t1, y0, args, tracked)

    def advance(
        self,
        terms: PyTree[diffrax.AbstractTerm],
        t0: Real[ArrayLike, ""],
        t1: Real[ArrayLike, ""],
        y0: PyTree,
        args: PyTree,
        tracked: RKCState,
    ) -> tuple[PyTree, PyTree, dict[str, PyTree], RKCState, diffrax.RESULTS]:
        """One ROCK4 step from a state whose f0 and ρ belong to (t0, y0)."""
        h = t1 - t0
        needed = stages_needed(h * self.safety * jnp.maximum(tracked.rho, 0.0))
        too_stiff = needed > MAX_STAGES
        idx = degree_index(needed)

        def stiff_step():
            y1, f1, y_error = rock4_step(terms, t0, h, y0, tracked.f0, args, idx)
            return y1, f1, y_error, jnp.asarray(DEGREES)[idx] + 4

        def rejected():  # costs nothing: the controller shrinks h and retries
            inf = jax.tree.map(lambda x: jnp.full_like(x, jnp.inf), y0)
            return y0, tracked.f0, inf, jnp.zeros((), jnp.int32)

        y1, f1, y_error, stages = jax.lax.cond(too_stiff, rejected, stiff_step)
        dense_info = dict(
            y0=y0, y1=y1, k0=tree_scale(h, tracked.f0), k1=tree_scale(h, f1)
        )
        new_state = RKCState(
            f0=f1,
            v=tracked.v,
            rho=tracked.rho,
            num_evals=tracked.num_evals + stages,  # s − 1 stages, then f(y1)
            max_stages=jnp.maximum(tracked.max_stages, stages),
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


def rock4_step(terms, t0, h, y0, f0, args, idx):
    """(y1, f(y1), error estimate) of one ROCK4 step with the degree at ``idx``.

    ``f0 = f(t0, y0)``; the step evaluates f DEGREES[idx] + 3 times, f(y1) included.
    """
    dtype = jax.tree.leaves(y0)[0].dtype
    recf = jnp.asarray(RECF, dtype)
    deg = jnp.asarray(DEGREES)[idx]
    start = jnp.asarray(OFFSETS)[idx]
    mu1 = recf[start]
    # the recurrence: Y_j = h μ_j f(Y_{j−1}) + (1 + κ_j) Y_{j−1} − κ_j Y_{j−2};
    # times c_j follow the same recurrence (the stage Y_j approximates y(t0 + c_j h))
    y_1 = jax.tree.map(lambda a, fa: a + h * mu1 * fa, y0, f0)

    def body(j, carry):
        yj1, yj2, cj1, cj2 = carry
        mu = recf[start + 2 * (j - 2) + 1]
        kappa = recf[start + 2 * (j - 2) + 2]
        fj1 = terms.vf(t0 + cj1 * h, yj1, args)
        yj = jax.tree.map(
            lambda a1, a2, fa: h * mu * fa + (1.0 + kappa) * a1 - kappa * a2,
            yj1,
            yj2,
            fj1,
        )
        return yj, yj1, mu + (1.0 + kappa) * cj1 - kappa * cj2, cj1

    zero = jnp.zeros((), dtype)
    u, _, c, _ = jax.lax.fori_loop(2, deg + 1, body, (y_1, y0, mu1, zero))
    a21, a31, a32, a41, a42, a43 = (jnp.asarray(FPA, dtype)[idx, i] for i in range(6))
    b = jnp.asarray(FPB, dtype)[idx]
    be = jnp.asarray(FPBE, dtype)[idx]

    def comb(base, coeffs, ks):
        return jax.tree.map(
            lambda x, *kk: x + h * sum(cf * k for cf, k in zip(coeffs, kk)), base, *ks
        )

    k1 = terms.vf(t0 + c * h, u, args)
    k2 = terms.vf(t0 + (c + a21) * h, comb(u, (a21,), (k1,)), args)
    k3 = terms.vf(t0 + (c + a31 + a32) * h, comb(u, (a31, a32), (k1, k2)), args)
    c4 = c + a41 + a42 + a43
    k4 = terms.vf(t0 + c4 * h, comb(u, (a41, a42, a43), (k1, k2, k3)), args)
    y1 = comb(u, tuple(b[i] for i in range(4)), (k1, k2, k3, k4))
    f1 = terms.vf(t0 + h, y1, args)
    # embedded third-order solution minus y1
    d = tuple(be[i] - b[i] for i in range(4)) + (be[4],)
    zeros = jax.tree.map(jnp.zeros_like, y0)
    y_error = comb(zeros, d, (k1, k2, k3, k4, f1))
    return y1, f1, y_error
