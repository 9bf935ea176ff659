"""Continuous limits of heavy-ball momentum and Adam, with their state as ODE variables.

Scaling. On the clock t = kη a fixed β makes the optimizer's memory last 1/(1 − β)
steps, i.e. η/(1 − β) → 0 units of flow time: the state is slaved to the gradient
and disappears from the limit (momentum becomes the flow sped up by 1/(1 − β); Adam
becomes sign descent). To keep the memory in the limit we hold its *flow-time* scale
fixed: β = 1 − γη with a rate γ (memory time 1/γ). Then, with the EMA forms

    μ_k = β μ_{k−1} + (1 − β) g_k,   θ_{k+1} = θ_k − η μ_k            (heavy ball)
    m_k = β₁ m + (1 − β₁) g,  v_k = β₂ v + (1 − β₂) g²,
    θ_{k+1} = θ_k − η m̂/(√v̂ + ε),  m̂ = m/(1 − β₁^k), v̂ = v/(1 − β₂^k)   (Adam)

are first-order discretisations of

    dμ/dt = γ(∇L − μ),  dθ/dt = −μ
    dm/dt = γ₁(∇L − m), dv/dt = γ₂(∇L² − v),
    dθ/dt = −m̂/(√v̂ + ε),  m̂ = m/(1 − e^{−γ₁t}), v̂ = v/(1 − e^{−γ₂t}).

The heavy ball in EMA form with step η is optax ``sgd(learning_rate=η(1 − β),
momentum=β)``; ``hyperparams(η)`` give the injected values for ``run_sweep``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Real

from gflow.array_types import LossFn, Model, Observables, RealVector
from gflow.dynamics.references.base import (
    AbstractReference,
    at_times,
    evaluate_along,
    union_times,
)
from gflow.dynamics.trajectory import Trajectory


class _MomentumField(eqx.Module):
    loss_fn: object
    static: object
    gamma: jax.Array

    def __call__(self, t, y, args):
        theta, mu = y
        g = jax.grad(lambda p: self.loss_fn(eqx.combine(p, self.static)))(theta)
        dmu = jax.tree.map(lambda a, b: self.gamma * (a - b), g, mu)
        return jax.tree.map(jnp.negative, mu), dmu


class _AdamField(eqx.Module):
    loss_fn: object
    static: object
    gamma1: jax.Array
    gamma2: jax.Array
    eps: jax.Array

    def __call__(self, t, y, args):
        theta, m, v = y
        g = jax.grad(lambda p: self.loss_fn(eqx.combine(p, self.static)))(theta)
        c1 = -jnp.expm1(-self.gamma1 * t)  # 1 − e^{−γ₁t}, accurate near t = 0
        c2 = -jnp.expm1(-self.gamma2 * t)

        def direction(gi, mi, vi):
            # at t = 0 the bias-corrected moments are g and g² (their limits)
            mh = jnp.where(c1 > 0, mi / jnp.where(c1 > 0, c1, 1.0), gi)
            vh = jnp.where(c2 > 0, vi / jnp.where(c2 > 0, c2, 1.0), gi**2)
            return -mh / (jnp.sqrt(jnp.maximum(vh, 0.0)) + self.eps)

        dtheta = jax.tree.map(direction, g, m, v)
        dm = jax.tree.map(lambda a, b: self.gamma1 * (a - b), g, m)
        dv = jax.tree.map(lambda a, b: self.gamma2 * (a**2 - b), g, v)
        return dtheta, dm, dv


@eqx.filter_jit
def _solve_ode(field, y0, ts, rtol, atol, max_steps):
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(field),
        diffrax.Tsit5(),
        t0=ts[0],
        t1=ts[-1],
        dt0=None,
        y0=y0,
        saveat=diffrax.SaveAt(ts=ts, fn=lambda t, y, args: y[0]),
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=max_steps,
        throw=False,
    )
    return sol.ys, sol.result


def _ode_reference(field, model, y0_extra, times, loss_fn, obs, rtol, atol, steps):
    params, static = eqx.partition(model, eqx.is_inexact_array)
    dtype = jax.tree.leaves(params)[0].dtype
    union = union_times(times)
    size = sum(len(t) for t in times)  # fixed length: one compile per sweep shape
    ts = np.concatenate([union, np.repeat(union[-1:], size - len(union))])
    snaps, result = _solve_ode(
        field,
        (params, *y0_extra(params)),
        jnp.asarray(ts, dtype),
        jnp.asarray(rtol, dtype),
        jnp.asarray(atol, dtype),
        steps,
    )
    if result != diffrax.RESULTS.successful:
        raise RuntimeError(f"the optimizer ODE failed: {result}")
    full = Trajectory(
        t=ts,
        metrics={"loss": np.zeros(len(ts))},
        final=model,
        params=eqx.combine(snaps, static),
    )
    full = evaluate_along(full, loss_fn, obs)
    return [at_times(full, union, t) for t in times]


def _zeros(params):
    return jax.tree.map(jnp.zeros_like, params)


class MomentumODEReference(AbstractReference):
    """dθ/dt = −μ, dμ/dt = γ(∇L − μ): the limit of heavy ball with β = 1 − γη."""

    gamma: float = 1.0
    rtol: float = 1e-10
    atol: float = 1e-12
    max_steps: int = 100_000
    name: ClassVar[str] = "momentum_ode"

    def hyperparams(self, lr: float) -> dict[str, float]:
        """Injected values of ``optax.sgd`` for step η: lr η(1 − β), β = 1 − γη."""
        beta = 1.0 - self.gamma * lr
        if not 0 <= beta < 1:
            raise ValueError(f"need γη < 1 for β = 1 − γη, got γη = {self.gamma * lr}")
        return {"learning_rate": lr * (1.0 - beta), "momentum": beta}

    def solve(
        self,
        loss_fn: LossFn,
        model: Model,
        times: Sequence[Real[ArrayLike, " _S"]],
        lrs: RealVector,
        observables: Observables = None,
    ) -> list[Trajectory]:
        static = eqx.partition(model, eqx.is_inexact_array)[1]
        dtype = jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array))[0].dtype
        field = _MomentumField(loss_fn, static, jnp.asarray(self.gamma, dtype))
        return _ode_reference(
            field,
            model,
            lambda p: (_zeros(p),),
            list(times),
            loss_fn,
            observables,
            self.rtol,
            self.atol,
            self.max_steps,
        )


class AdamODEReference(AbstractReference):
    """The Adam ODE with moments m, v as variables: the limit of β_i = 1 − γ_iη."""

    gamma1: float = 1.0
    gamma2: float = 0.01
    eps: float = 1e-8
    rtol: float = 1e-8
    atol: float = 1e-10
    max_steps: int = 200_000
    name: ClassVar[str] = "adam_ode"

    def hyperparams(self, lr: float) -> dict[str, float]:
        """Injected values of ``optax.adam`` for step η: β_i = 1 − γ_iη."""
        b1, b2 = 1.0 - self.gamma1 * lr, 1.0 - self.gamma2 * lr
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ValueError(
                f"need γ_i η < 1, got {self.gamma1 * lr}, {self.gamma2 * lr}"
            )
        return {"learning_rate": lr, "b1": b1, "b2": b2, "eps": self.eps}

    def solve(
        self,
        loss_fn: LossFn,
        model: Model,
        times: Sequence[Real[ArrayLike, " _S"]],
        lrs: RealVector,
        observables: Observables = None,
    ) -> list[Trajectory]:
        static = eqx.partition(model, eqx.is_inexact_array)[1]
        dtype = jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array))[0].dtype

        def c(x):
            return jnp.asarray(x, dtype)

        field = _AdamField(loss_fn, static, c(self.gamma1), c(self.gamma2), c(self.eps))
        return _ode_reference(
            field,
            model,
            lambda p: (_zeros(p), _zeros(p)),
            list(times),
            loss_fn,
            observables,
            self.rtol,
            self.atol,
            self.max_steps,
        )
