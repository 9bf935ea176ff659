"""Central flows of preconditioned optimizers: RMSProp, and attempts for heavy ball
and Adam.

RMSProp (Cohen, Damian, Talwalkar, Kolter, Lee, arXiv 2410.24206, the RMSProp
section) steps θ ← θ − η d ⊙ ∇L with d = (ν + ε)^{-1/2} and ν an average of squared
gradients (``gflow.dynamics.optimizers.RMSProp``). At the edge of stability the top
eigenvalue of the *preconditioned* Hessian S = D^{1/2} H D^{1/2} (D = diag d) sits at
2/η, and the time average of the oscillating run follows, on the clock t = kη,

    dθ/dt = −d ⊙ (∇L + ½ ∇⟨Σ, H⟩),
    dν/dt = r (∇L² + diag(H Σ H) − ν),      r = (1 − β)/(βη),

with Σ = U X Uᵀ, U = D^{1/2} V the top generalised eigenvectors (S V = V Λ) and
X ⪰ 0 chosen so that Vᵀ S V stays ⪯ (c/η) I, c = 2. The oscillation enters twice: as
GD's third-derivative push, and through ν, which it raises by diag(HΣH), lowering d
and so S (RMSProp's own way back from the edge). Along the flow

    d(Vᵀ S V)_ij/dt = ⟨T_ij, dθ/dt⟩ + ½(λ_i + λ_j) Σ_p v_ip v_jp q_p dν_p/dt,

T_ij = ∇_θ(u_iᵀ H u_j), q = ∂ log d/∂ν, which is affine in X: b − A(X) with
A(X)_ij = ½ Σ G_ijkl X_kl,

    G_ijkl = ⟨T_ij, d ⊙ T_kl⟩ − 2 e³ r Σ_p (q_p/d_p) v_ip v_jp v_kp v_lp,

where the eigenvalues in the ν term are set to the edge e = c/η (X is non-zero only
on eigenvalues at the edge; with that, G is symmetric and positive semidefinite, so
the complementarity problem is the convex program ``solve_complementarity`` solves).
ν(0) = ∇L(θ_0)², as the optimizer starts. Integration, eigen tracking and the
restoring term are those of ``CentralFlowReference`` (RK4, ``substeps`` per step).

Heavy ball and Adam: no central flow is derived for them (the "rod flow" papers,
Regis and Chewi, arXiv 2602.01480, claim explicit models; no code is public). The
classes below are an *attempt*, the quasi-static one: the momentum buffer averages
over 1/(1 − β₁) steps, short on the clock t = kη, so it is replaced by its steady
state (heavy ball moves at 1/(1 − β) times the gradient; Adam's m by the averaged
gradient), and the edge is the method's own stability limit on a quadratic,
(2 + 2β)/η on ηH for heavy ball and (2 + 2β₁)/(1 − β₁)/η on η D H for Adam.
docs/flow_vs_optimizers.md measures where this works and where it does not.
"""

from __future__ import annotations

import abc
import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from gflow.array_types import LossFn, Model
from gflow.dynamics.optimizers import SGD, AbstractOptimizer, Adam, Momentum, RMSProp
from gflow.dynamics.references.base import AbstractReference
from gflow.dynamics.references.central import (
    AbstractCentralFlow,
    CentralFlowReference,
    central_trajectory,
    flat_problem,
    save_grid,
    solve_complementarity,
    third_derivatives,
    top_eigenpairs,
)
from gflow.dynamics.trajectory import Trajectory


class AbstractPreconditionedCentralFlow(AbstractCentralFlow):
    """The central flow of θ ← θ − η d(ν) ⊙ ∇L with ν an EMA of squared gradients.

    A subclass says what d(ν) is, how fast ν moves, where ν starts and where the
    edge is. ``oscillation=False`` gives the *stable flow*, the same ODE with Σ = 0
    (what the run would follow if it never reached its edge). The other settings are
    ``AbstractCentralFlow``'s, except that ``substeps`` is per 2/η of edge: an edge
    at c/η takes ``substeps``·⌈c/2⌉ RK4 substeps per step, so that λ·dt ≤ 1 at the
    edge (RK4 is stable to 2.78; at c = 38 two substeps per step would put the edge
    outside its stability interval and the integration would stall on a period-2
    orbit of its own).
    """

    oscillation: bool = True

    @property
    @abc.abstractmethod
    def edge_constant(self) -> float:
        """c: the flow holds λ_max(D^{1/2} H D^{1/2}) at c/η."""

    @abc.abstractmethod
    def rate(self, lr, t):
        """r(t): dν/dt = r (E[g²] − ν) on the clock t = kη (0 where ν is unused)."""

    @abc.abstractmethod
    def precondition(self, nu):
        """d(ν), elementwise: the step is −η d ⊙ ∇L."""

    def solve_one(
        self, loss_fn: LossFn, model: Model, times: Float[np.ndarray, " S"], lr: float
    ) -> Trajectory:
        """The central flow at step ``lr`` from ``model``, saved at ``times``.

        Its ``lambda_max`` metric is the preconditioned sharpness λ_max(S), to be
        read against ``edge_constant``/η.
        """
        substeps = self.substeps_per_step
        idx, counts, dt = save_grid(times, lr, substeps)
        self.check_start(loss_fn, model, lr)
        flat_loss, w0, unravel, static = flat_problem(loss_fn, model)
        out = _integrate(
            self, flat_loss, w0, jnp.asarray(counts), jnp.asarray(dt, w0.dtype)
        )
        return central_trajectory(
            self, flat_loss, out, idx * dt, unravel, static, lr, substeps
        )

    def check_start(self, loss_fn: LossFn, model: Model, lr: float) -> None:
        """ValueError if the run starts past its edge: η λ_max(S) > c at θ_0 (the
        central flow describes runs that reach the edge, not runs that start
        beyond it; there the first steps are a blow-up and a collapse)."""
        flat_loss, w0, _, _ = flat_problem(loss_fn, model)
        lam = float(_initial_sharpness(self, flat_loss, w0))
        if self.oscillation and lr * lam > self.edge_constant:
            raise ValueError(
                f"{type(self).__name__}: at step {lr:g} the run starts past its edge "
                f"of stability (η·λ_max = {lr * lam:.3g} > {self.edge_constant:.3g}), "
                "which no central flow describes; a smaller step or, for RMSProp "
                "and Adam, a larger ε (it bounds the preconditioner by 1/√ε) starts "
                "it below"
            )

    @property
    def substeps_per_step(self) -> int:
        """RK4 substeps per optimizer step: ``substeps``·⌈c/2⌉."""
        return self.substeps * max(1, math.ceil(self.edge_constant / 2 - 1e-9))


class RMSPropCentralFlowReference(AbstractPreconditionedCentralFlow):
    """RMSProp's central flow (``gflow.dynamics.optimizers.RMSProp``, decay β)."""

    beta: float = 0.9
    eps: float = 1e-8
    name: ClassVar[str] = "central"

    def __check_init__(self):
        if not 0 < self.beta < 1:
            raise ValueError(f"beta must lie in (0, 1), got {self.beta}")
        if not self.eps >= 0:
            raise ValueError(f"eps must be >= 0, got {self.eps}")

    @property
    def edge_constant(self) -> float:
        return 2.0

    def rate(self, lr, t):
        return (1.0 - self.beta) / (self.beta * lr)

    def precondition(self, nu):
        return jax.lax.rsqrt(nu + self.eps)

    def hyperparams(self, lr: float) -> dict[str, float]:
        """RMSProp at step η: ``{"learning_rate": η, "decay": β, "eps": ε}``."""
        return {"learning_rate": lr, "decay": self.beta, "eps": self.eps}


class MomentumCentralFlowReference(AbstractPreconditionedCentralFlow):
    """Attempt: heavy ball (optax ``sgd(momentum=β)``) as GD's central flow sped
    up by 1/(1 − β), with λ_max(H) held at (2 + 2β)/η."""

    beta: float = 0.9
    name: ClassVar[str] = "central"

    def __check_init__(self):
        if not 0 <= self.beta < 1:
            raise ValueError(f"beta must lie in [0, 1), got {self.beta}")

    @property
    def edge_constant(self) -> float:
        # S = H/(1 − β): ηλ(H) < 2 + 2β is λ(S) < (2 + 2β)/((1 − β)η)
        return (2.0 + 2.0 * self.beta) / (1.0 - self.beta)

    def rate(self, lr, t):
        return 0.0

    def precondition(self, nu):
        return jnp.full_like(nu, 1.0 / (1.0 - self.beta))

    def hyperparams(self, lr: float) -> dict[str, float]:
        """Heavy ball at step η: ``{"learning_rate": η, "momentum": β}``."""
        return {"learning_rate": lr, "momentum": self.beta}


class AdamCentralFlowReference(AbstractPreconditionedCentralFlow):
    """Attempt: Adam (optax ``adam(b1=β₁, b2=β₂)``) with m at its steady state: the
    RMSProp-like flow d = 1/(√ν + ε), edge (2 + 2β₁)/(1 − β₁)/η on η D H."""

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    name: ClassVar[str] = "central"

    def __check_init__(self):
        if not (0 <= self.beta1 < 1 and 0 < self.beta2 < 1):
            raise ValueError(
                f"need 0 <= beta1 < 1 and 0 < beta2 < 1, got {self.beta1}, {self.beta2}"
            )

    @property
    def edge_constant(self) -> float:
        return (2.0 + 2.0 * self.beta1) / (1.0 - self.beta1)

    def rate(self, lr, t):
        # Adam's v̂ = v/(1 − β₂^k) is the normalised average of the k gradients so
        # far: v̂_k − v̂_{k−1} = (1 − β₂)/(β₂(1 − β₂^{k−1}))·(g_k² − v̂_k), with
        # k − 1 = t/η (t ≥ one substep: the rate is infinite at t = 0, where
        # ν = g² already)
        steps = jnp.maximum(t, lr / self.substeps_per_step) / lr
        return (1.0 - self.beta2) / (
            self.beta2 * lr * -jnp.expm1(steps * math.log(self.beta2))
        )

    def precondition(self, nu):
        return 1.0 / (jnp.sqrt(nu) + self.eps)

    def hyperparams(self, lr: float) -> dict[str, float]:
        """Adam at step η: ``{"learning_rate": η, "b1": β₁, "b2": β₂}``."""
        return {"learning_rate": lr, "b1": self.beta1, "b2": self.beta2}


def preconditioned_velocity(
    cfg: AbstractPreconditionedCentralFlow,
    f,
    w: Float[Array, " n"],
    nu: Float[Array, " n"],
    V: Float[Array, "n k"],
    X: Float[Array, "k k"],
    lr,
    eig_iters: int,
    t=0.0,
):
    """(dθ/dt, dν/dt) of the central flow at (θ, ν) and time t, and the updated
    (V, λ, X, ½⟨Σ, H⟩); V holds the eigenvectors of S = D^{1/2} H D^{1/2} (see the
    module)."""
    n = w.shape[0]
    g = jax.grad(f)(w)
    d = cfg.precondition(nu)
    q = jax.grad(lambda x: jnp.sum(jnp.log(cfg.precondition(x))))(nu)  # ∂ log d/∂ν
    sd = jnp.sqrt(d)
    lam, V_new = top_eigenpairs(
        lambda z: f(w + sd * z), jnp.zeros_like(w), V, eig_iters
    )
    R = V_new.T @ V  # carry X into the new eigenbasis (rotations, sign flips)
    X = R @ X @ R.T
    edge = cfg.edge_constant / lr
    r = cfg.rate(lr, t)
    on = ((lam >= cfg.active * edge) & cfg.oscillation).astype(w.dtype)
    mask = on[:, None] * on[None, :]
    k = lam.shape[0]
    U = sd[:, None] * V_new  # generalised eigenvectors: H U = D⁻¹ U Λ
    HU = V_new * lam[None, :] / sd[:, None]
    dw0 = -d * g
    dnu0 = r * (g * g - nu)

    def at_edge():
        T = third_derivatives(f, w, U)
        flat = T.reshape(k * k, n)
        vv = (V_new[:, :, None] * V_new[:, None, :]).reshape(n, k * k)
        G = (flat * d) @ flat.T - 2.0 * edge**3 * r * (vv.T * (q / d)) @ vv
        half_sum = 0.5 * (lam[:, None] + lam[None, :])
        b = (
            T @ dw0
            + half_sum * (vv.T @ (q * dnu0)).reshape(k, k)
            + (cfg.restore / lr) * jnp.diag(lam - edge)
        )
        X_new = solve_complementarity(
            G.reshape(k, k, k, k), b * mask, mask, X, cfg.qp_iters
        )
        push = -0.5 * d * jnp.einsum("ij,ijn->n", X_new, T)
        hsh = jnp.einsum("kl,pk,pl->p", X_new, HU, HU)  # diag(H Σ H)
        return X_new, push, hsh

    def below():
        return jnp.zeros_like(X), jnp.zeros_like(w), jnp.zeros_like(w)

    X_new, push, hsh = jax.lax.cond(jnp.any(on > 0), at_edge, below)
    extra = 0.5 * jnp.sum(jnp.diag(X_new) * lam)  # ½⟨Σ, H⟩ = ½ Σ X_ii λ_i
    return dw0 + push, dnu0 + r * hsh, V_new, lam, X_new, extra


def _start(cfg, f, w0, iters: int = 100):
    """ν(0) = ∇L(θ_0)² and the top eigenpairs of S there (a cold start)."""
    g0 = jax.grad(f)(w0)
    nu0 = g0 * g0
    sd0 = jnp.sqrt(cfg.precondition(nu0))
    n, k = w0.shape[0], min(cfg.num_eigs, w0.shape[0])
    V0 = jax.random.normal(jax.random.key(0), (n, k), w0.dtype)
    lam, V0 = top_eigenpairs(lambda z: f(w0 + sd0 * z), jnp.zeros_like(w0), V0, iters)
    return nu0, lam, V0


@eqx.filter_jit
def _initial_sharpness(cfg, f, w0):
    return _start(cfg, f, w0)[1][0]


@eqx.filter_jit
def _integrate(cfg, f, w0, counts, dt):
    """Classic RK4 on (θ, ν); the state after each count of substeps (as in
    ``gflow.dynamics.references.central._integrate``)."""
    k = min(cfg.num_eigs, w0.shape[0])
    lr = dt * cfg.substeps_per_step
    nu0, _, V0 = _start(cfg, f, w0)

    def velocity(w, nu, V, X, t, iters=1):
        return preconditioned_velocity(cfg, f, w, nu, V, X, lr, iters, t)

    def substep(_, state):
        w, nu, V, X, t = state
        h = 0.5 * dt
        k1w, k1n, V, _, X, _ = velocity(w, nu, V, X, t, cfg.eig_iters)
        k2w, k2n = velocity(w + h * k1w, nu + h * k1n, V, X, t + h)[:2]
        k3w, k3n = velocity(w + h * k2w, nu + h * k2n, V, X, t + h)[:2]
        k4w, k4n = velocity(w + dt * k3w, nu + dt * k3n, V, X, t + dt)[:2]
        w = w + (dt / 6.0) * (k1w + 2.0 * k2w + 2.0 * k3w + k4w)
        nu = nu + (dt / 6.0) * (k1n + 2.0 * k2n + 2.0 * k3n + k4n)
        return w, jnp.maximum(nu, 0.0), V, X, t + dt

    def segment(state, count):
        w, nu, V, X, t = jax.lax.fori_loop(0, count, substep, state)
        _, _, V, lam, X, extra = velocity(w, nu, V, X, t, cfg.eig_iters)
        ok = jnp.all(jnp.isfinite(w)) & jnp.all(jnp.isfinite(nu))
        return (w, nu, V, X, t), (w, lam[0], extra, ok)

    state = (w0, nu0, V0, jnp.zeros((k, k), w0.dtype), jnp.zeros((), w0.dtype))
    _, out = jax.lax.scan(segment, state, counts)
    return out


#: The optimizers with a central flow (``central_flow_of``); heavy ball and Adam's
#: are the quasi-static attempts.
CENTRAL_FLOW_OPTIMIZERS = ("sgd", "rmsprop", "momentum", "adam")


def central_flow_of(optimizer: AbstractOptimizer) -> AbstractReference:
    """The central-flow reference of ``optimizer`` (its β and ε carried over)."""
    if isinstance(optimizer, SGD):
        return CentralFlowReference()
    if isinstance(optimizer, RMSProp):
        return RMSPropCentralFlowReference(beta=optimizer.beta, eps=optimizer.eps)
    if isinstance(optimizer, Momentum):
        return MomentumCentralFlowReference(beta=optimizer.beta)
    if type(optimizer) is Adam:
        return AdamCentralFlowReference(beta1=optimizer.beta)
    raise ValueError(
        f"no central flow for {optimizer.name!r}; choose one of "
        f"{', '.join(CENTRAL_FLOW_OPTIMIZERS)}"
    )
