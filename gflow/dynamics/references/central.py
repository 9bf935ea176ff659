"""The central flow of gradient descent at the edge of stability (Cohen et al. 2024).

GD at step η on a loss whose sharpness λ_max(H) would exceed 2/η does not diverge:
it oscillates along the top eigenvectors, and the oscillation itself pushes the
sharpness back down. Cohen, Damian, Talwalkar, Kolter and Lee ("Understanding
Optimization in Deep Learning with Central Flows", arXiv 2410.24206) show that the
time average of such GD follows an ODE, the *central flow*. On gflow's clock
t = kη it reads

    dw/dt = −∇L(w) − ½ ∇_w ⟨Σ, H(w)⟩,   Σ = U X Uᵀ,  X ⪰ 0 (k×k),

where U holds the top eigenvectors of H(w) and X, the covariance of the oscillation
in that basis, solves the complementarity problem that keeps the sharpness at 2/η:

    X ⪰ 0,   A(X) − b ⪰ 0,   ⟨X, A(X) − b⟩ = 0,

with T_ij = ∇_w (u_iᵀ H(w) u_j) (third derivatives), b_ij = −⟨T_ij, ∇L⟩ (the rate
at which the flow sharpens the eigenvalues) and A(X)_ij = ½ Σ_kl ⟨T_ij, T_kl⟩ X_kl;
the time derivative of Uᵀ H U along dw/dt is b − A(X). Only eigenvalues at or above
``active``·2/η take part; below the edge X = 0 and this is the gradient flow.

gflow's version stays inside one compiled program: the eigenpairs are tracked by
warm-started block Krylov–Rayleigh–Ritz iterations on Hessian-vector products
(dense ``eigh`` for tiny models), and
the complementarity problem, a convex quadratic program over the PSD cone
(min ½⟨X, A X⟩ − ⟨b, X⟩, X ⪰ 0), is solved by accelerated projected gradient in
JAX, warm-started from the previous substep, instead of by a host-side convex solver.
A restoring term (rate ``restore``/η) pulls an eigenvalue that overshoots 2/η back.
The ODE is integrated by classic RK4 with ``substeps`` substeps per GD step (the
authors' code uses Euler with 4; Euler's O(dt) error would itself move the
reference a quarter of the way towards GD, which is Euler with dt = η). The
predicted time-averaged loss L + ½⟨Σ, H⟩ is recorded as the ``predicted_loss``
metric, the tracked λ_max as ``lambda_max``.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, ArrayLike, Float, Real

from gflow.array_types import LossFn, Model, Observables, RealVector
from gflow.dynamics.references.base import AbstractReference, evaluate_along
from gflow.dynamics.trajectory import Status, Trajectory


class AbstractCentralFlow(AbstractReference):
    """A central flow on the shared clock: the settings of its integration, which
    every central flow shares, and ``solve`` through ``solve_one`` per member.

    Attributes:
        substeps: RK4 substeps per step of the member (dt = η / substeps).
        num_eigs: k, the top eigenpairs tracked (the most that can be at the edge).
        active: eigenvalues ≥ ``active`` · (the edge, 2/η for GD) enter the
            constraint.
        restore: rate, in units of 1/η, at which an eigenvalue above the edge is
            pulled back to it.
        eig_iters: eigensolver iterations at each substep's first stage (warm-started
            from the last substep; the other three RK4 stages take one).
        qp_iters: projected-gradient iterations of the complementarity problem per
            substep (warm-started).
    """

    substeps: int = 2
    num_eigs: int = 2
    active: float = 0.975
    restore: float = 0.5
    eig_iters: int = 2
    qp_iters: int = 60

    def __check_init__(self):
        if self.substeps < 1 or self.num_eigs < 1:
            raise ValueError("substeps and num_eigs must be >= 1")
        if not 0 < self.active <= 1:
            raise ValueError(f"active must lie in (0, 1], got {self.active}")
        if not self.restore >= 0:
            raise ValueError(f"restore must be >= 0, got {self.restore}")
        if self.eig_iters < 1 or self.qp_iters < 1:
            raise ValueError("eig_iters and qp_iters must be >= 1")

    def solve(
        self,
        loss_fn: LossFn,
        model: Model,
        times: Sequence[Real[ArrayLike, " _S"]],
        lrs: RealVector,
        observables: Observables = None,
    ) -> list[Trajectory]:
        """One Trajectory per member, at that member's times (multiples of η)."""
        return solve_members(self, loss_fn, model, times, lrs, observables)

    @abc.abstractmethod
    def solve_one(
        self, loss_fn: LossFn, model: Model, times: Float[np.ndarray, " S"], lr: float
    ) -> Trajectory:
        """The central flow at step ``lr`` from ``model``, saved at ``times``."""


class CentralFlowReference(AbstractCentralFlow):
    """GD's central flow at each member's step size η (one solve per member); the
    settings are ``AbstractCentralFlow``'s."""

    name: ClassVar[str] = "central"

    def hyperparams(self, lr: float) -> dict[str, float]:
        """GD at step η: ``{"learning_rate": η}``."""
        return {"learning_rate": lr}

    def solve_one(
        self, loss_fn: LossFn, model: Model, times: Float[np.ndarray, " S"], lr: float
    ) -> Trajectory:
        """The central flow of GD at step ``lr`` from ``model``, saved at ``times``.

        Saved times are rounded to the substep grid (exact for multiples of η).
        """
        idx, counts, dt = save_grid(times, lr, self.substeps)
        flat_loss, w0, unravel, static = flat_problem(loss_fn, model)
        out = _integrate(
            self, flat_loss, w0, jnp.asarray(counts), jnp.asarray(dt, w0.dtype)
        )
        return central_trajectory(
            self, flat_loss, out, idx * dt, unravel, static, lr, self.substeps
        )


def solve_members(ref, loss_fn, model, times, lrs, observables) -> list[Trajectory]:
    """``ref.solve_one`` per member, with ``observables`` evaluated along each and the
    central flow's own ``lambda_max`` and ``predicted_loss`` kept."""
    out = []
    for t, lr in zip(times, np.asarray(lrs, float)):
        traj = ref.solve_one(loss_fn, model, np.asarray(t, float), float(lr))
        extra = {k: traj.metrics[k] for k in ("lambda_max", "predicted_loss")}
        traj = evaluate_along(traj, loss_fn, observables)
        traj.metrics.update(extra)
        out.append(traj)
    return out


def save_grid(times, lr: float, substeps: int):
    """Checked ``times`` as substep indices: (idx, substeps between saves, dt)."""
    times = np.asarray(times, float)
    if times.ndim != 1 or len(times) == 0 or np.any(np.diff(times) < 0):
        raise ValueError("times must be a non-empty, non-decreasing 1-d array")
    if times[0] < 0:
        raise ValueError(f"times must be >= 0, got {times[0]}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    dt = lr / substeps
    idx = np.rint(times / dt).astype(np.int64)
    counts = np.diff(np.concatenate([[0], idx])).astype(np.int32)
    return idx, counts, dt


def central_trajectory(
    ref, flat_loss, out, t, unravel, static, lr, substeps
) -> Trajectory:
    """The Trajectory of an integrated central flow ``out`` = (ws, λ, ½⟨Σ, H⟩, ok),
    ``substeps`` per step of size ``lr``."""
    ws, lam, extra_loss, finite = (np.asarray(x) for x in out)
    status: Status = "success" if finite.all() else "diverged"
    snaps = jax.vmap(unravel)(jnp.asarray(ws))
    last = int(np.nonzero(finite)[0][-1]) if finite.any() else 0
    loss = np.asarray(jax.vmap(flat_loss)(jnp.asarray(ws)))
    return Trajectory(
        t=t,
        metrics={"loss": loss, "lambda_max": lam, "predicted_loss": loss + extra_loss},
        final=eqx.combine(unravel(jnp.asarray(ws[last])), static),
        params=eqx.combine(snaps, static),
        status=status,
        stats={"substeps": int(round(t[-1] / lr * substeps)), "grad_evals": None},
        info={
            "reference": ref.name,
            "lr": lr,
            "substeps": substeps,
            "num_eigs": ref.num_eigs,
        },
    )


def flat_problem(loss_fn: LossFn, model: Model):
    """(w ↦ loss, w0, unravel, static): the model's inexact leaves as one vector."""
    params, static = eqx.partition(model, eqx.is_inexact_array)
    w0, unravel = ravel_pytree(params)
    return FlatLoss(loss_fn, static, params), w0, unravel, static


class FlatLoss(eqx.Module):
    """w ↦ loss(model with flat parameters w), as a Module so that every member of a
    sweep reuses one compiled integration (a closure would be a new function)."""

    loss_fn: LossFn
    static: Model
    treedef: object = eqx.field(static=True)
    shapes: tuple = eqx.field(static=True)

    def __init__(self, loss_fn, static, params):
        self.loss_fn, self.static = loss_fn, static
        leaves, self.treedef = jax.tree.flatten(params)
        self.shapes = tuple((x.shape, x.dtype) for x in leaves)

    def __call__(self, w):
        leaves, start = [], 0
        for shape, dtype in self.shapes:
            size = int(np.prod(shape))
            leaves.append(w[start : start + size].reshape(shape).astype(dtype))
            start += size
        params = jax.tree.unflatten(self.treedef, leaves)
        return self.loss_fn(eqx.combine(params, self.static))


def _hvp(f, w, v):
    return jax.jvp(jax.grad(f), (w,), (v,))[1]


def top_eigenpairs(
    f, w: Float[Array, " n"], U: Float[Array, "n k"], iters: int
) -> tuple[Float[Array, " k"], Float[Array, "n k"]]:
    """Top-k eigenpairs of ∇²f(w), descending, warm-started from the columns of U.

    Block Krylov–Rayleigh–Ritz on Hessian-vector products: each iteration takes the
    top k Ritz pairs of H on span[U, HU] (2k products; Householder QR keeps the
    basis orthonormal when HU already lies in span U). Dense ``eigh`` when n ≤ 4k.
    """
    n, k = U.shape
    if n <= 4 * k:
        H = jax.vmap(lambda e: _hvp(f, w, e))(jnp.eye(n, dtype=w.dtype))
        lam, V = jnp.linalg.eigh(0.5 * (H + H.T))
        return lam[::-1][:k], V[:, ::-1][:, :k]
    hvps = jax.vmap(lambda v: _hvp(f, w, v), in_axes=1, out_axes=1)

    def body(_, carry):
        U, _ = carry
        Q, _ = jnp.linalg.qr(jnp.concatenate([U, hvps(U)], axis=1))
        M = Q.T @ hvps(Q)
        lam, V = jnp.linalg.eigh(0.5 * (M + M.T))
        return Q @ V[:, ::-1][:, :k], lam[::-1][:k]

    U, _ = jnp.linalg.qr(U)
    U, lam = jax.lax.fori_loop(0, iters, body, (U, jnp.zeros(k, w.dtype)))
    return lam, U


def third_derivatives(f, w, U):
    """T[i, j] = ∇_w (u_iᵀ ∇²f(w) u_j), float [k, k, n] (symmetric in i, j)."""
    k = U.shape[1]
    iu, ju = np.triu_indices(k)

    def t_ij(ui, uj):
        return jax.grad(lambda x: jnp.vdot(ui, _hvp(f, x, uj)))(w)

    upper = jax.vmap(t_ij)(U[:, iu].T, U[:, ju].T)
    T = jnp.zeros((k, k, w.shape[0]), w.dtype)
    T = T.at[iu, ju].set(upper)
    return T.at[ju, iu].set(upper)


def _psd_part(X):
    lam, V = jnp.linalg.eigh(0.5 * (X + X.T))
    return (V * jnp.maximum(lam, 0.0)) @ V.T


def solve_complementarity(
    G: Float[Array, "k k k k"],
    b: Float[Array, "k k"],
    mask: Float[Array, "k k"],
    X0: Float[Array, "k k"],
    iters: int,
) -> Float[Array, "k k"]:
    """X ⪰ 0 minimising ½⟨X, A X⟩ − ⟨b, X⟩ with A(X)_ij = ½ Σ G_ijkl X_kl.

    Its optimality conditions are the complementarity problem X ⪰ 0, A(X) − b ⪰ 0,
    ⟨X, A(X) − b⟩ = 0. Entries outside ``mask`` (inactive eigenvalues) stay zero.
    Accelerated projected gradient (FISTA) from ``X0``, with step 1/‖A‖.
    """
    k = b.shape[0]
    A_mat = 0.5 * G.reshape(k * k, k * k)
    step = 1.0 / jnp.maximum(jnp.linalg.norm(A_mat, 2), 1e-30)

    def apply(X):
        return (A_mat @ X.reshape(-1)).reshape(k, k)

    def proj(X):
        return _psd_part(mask * X) * mask

    def body(_, carry):
        X, Y, s = carry
        X_new = proj(Y - step * (apply(Y) - b))
        s_new = 0.5 * (1.0 + jnp.sqrt(1.0 + 4.0 * s**2))
        Y_new = X_new + ((s - 1.0) / s_new) * (X_new - X)
        return X_new, Y_new, s_new

    X0 = proj(X0)
    X, _, _ = jax.lax.fori_loop(0, iters, body, (X0, X0, jnp.ones((), b.dtype)))
    return X


def central_velocity(cfg: CentralFlowReference, f, w, U, X, lr, eig_iters=None):
    """dw/dt of the central flow at w, and the updated (U, λ, X, ½⟨Σ, H⟩).

    ``eig_iters`` eigensolver iterations from U (default ``cfg.eig_iters``).
    """
    g = jax.grad(f)(w)
    iters = cfg.eig_iters if eig_iters is None else eig_iters
    lam, U_new = top_eigenpairs(f, w, U, iters)
    R = U_new.T @ U  # carry X into the new eigenbasis (rotations, sign flips)
    X = R @ X @ R.T
    edge = 2.0 / lr
    on = (lam >= cfg.active * edge).astype(w.dtype)
    mask = on[:, None] * on[None, :]

    def at_edge():
        T = third_derivatives(f, w, U_new)
        k = T.shape[0]
        flat = T.reshape(k * k, -1)
        G = (flat @ flat.T).reshape(k, k, k, k)
        b = -(T @ g) + (cfg.restore / lr) * jnp.diag(lam - edge)
        X_new = solve_complementarity(G, b * mask, mask, X, cfg.qp_iters)
        push = 0.5 * jnp.einsum("ij,ijn->n", X_new, T)
        return X_new, push

    def below():
        return jnp.zeros_like(X), jnp.zeros_like(w)

    X_new, push = jax.lax.cond(jnp.any(on > 0), at_edge, below)
    extra = 0.5 * jnp.sum(X_new * jnp.diag(lam))  # ½⟨Σ, H⟩ in the eigenbasis
    return -g - push, U_new, lam, X_new, extra


@eqx.filter_jit
def _integrate(cfg, f, w0, counts, dt):
    """Classic RK4 on the central flow; the state after each count of substeps.

    Every stage warm-starts its eigensolver and complementarity problem from the
    substep's first stage; the first runs ``eig_iters`` eigensolver iterations, the
    others one (the eigenvectors move by O(dt) within a substep).
    """
    n, k = w0.shape[0], min(cfg.num_eigs, w0.shape[0])
    U0 = jax.random.normal(jax.random.key(0), (n, k), w0.dtype)
    _, U0 = top_eigenpairs(f, w0, U0, 100)  # a cold start needs more iterations
    lr = dt * cfg.substeps

    def velocity(w, U, X, iters=None):
        return central_velocity(cfg, f, w, U, X, lr, iters)

    def substep(_, state):
        w, U, X = state
        k1, U, _, X, _ = velocity(w, U, X)
        k2 = velocity(w + 0.5 * dt * k1, U, X, 1)[0]
        k3 = velocity(w + 0.5 * dt * k2, U, X, 1)[0]
        k4 = velocity(w + dt * k3, U, X, 1)[0]
        return w + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4), U, X

    def segment(state, count):
        w, U, X = jax.lax.fori_loop(0, count, substep, state)
        _, U, lam, X, extra = velocity(w, U, X)  # λ and ½⟨Σ, H⟩ at the save
        return (w, U, X), (w, lam[0], extra, jnp.all(jnp.isfinite(w)))

    state = (w0, U0, jnp.zeros((k, k), w0.dtype))
    _, (ws, lam, extra, finite) = jax.lax.scan(segment, state, counts)
    return ws, lam, extra, finite
