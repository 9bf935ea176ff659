"""The optimizers that gflow's commands run, one object each, and their name table.

Each object builds its optax transformation with ``optax.inject_hyperparams``, so the
learning rate (and β) live in the optimizer state: a sweep replaces them per member
without recompiling, and the flow clock reads the step size back from the state. Each
also carries its stability constant c: on a quadratic of curvature λ the method is
stable iff ηλ < c, which ``gflow.analysis.sharpness.predicted_departure`` turns into
a predicted departure time from the flow.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from typing import ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax


class AbstractOptimizer(eqx.Module):
    """An optax optimizer as an object: its name, transformation and stability."""

    name: eqx.AbstractClassVar[str]

    @abc.abstractmethod
    def rule(self) -> tuple[Callable[..., optax.GradientTransformation], dict]:
        """The optax function of this method and its hyperparameters but the
        learning rate (``optax.adamw``, ``{"b1": β, "weight_decay": λ}``)."""

    def transform(
        self, learning_rate: float | optax.Schedule = 0.1
    ) -> optax.GradientTransformation:
        """The optax transformation, hyperparameters injected into its state
        (``learning_rate`` a number or an optax schedule)."""
        fn, kwargs = self.rule()
        return optax.inject_hyperparams(fn)(learning_rate=learning_rate, **kwargs)

    def plain(
        self, learning_rate: float | optax.Schedule = 0.1
    ) -> optax.GradientTransformation:
        """The plain optax transformation, as a hand-written loop calls it (the
        injected hyperparameters of ``transform`` round differently in float32)."""
        fn, kwargs = self.rule()
        return fn(learning_rate=learning_rate, **kwargs)

    @classmethod
    def from_settings(cls, **settings: float) -> AbstractOptimizer:
        """The optimizer built from a configuration's settings, each taken where
        the method has it (β, weight decay, ε) and ignored where it has none."""
        own = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in settings.items() if k in own})

    @property
    @abc.abstractmethod
    def stability(self) -> float:
        """c such that the method is stable on a quadratic of curvature λ iff ηλ < c."""


class SGD(AbstractOptimizer):
    """Plain gradient descent, ``optax.sgd``: c = 2."""

    name: ClassVar[str] = "sgd"

    def rule(self):
        return optax.sgd, {}

    @property
    def stability(self) -> float:
        return 2.0


class Momentum(AbstractOptimizer):
    """Heavy ball, ``optax.sgd(momentum=β)``: c = 2 + 2β."""

    beta: float = 0.9
    name: ClassVar[str] = "momentum"

    def __check_init__(self):
        if not 0 <= self.beta < 1:
            raise ValueError(f"beta must lie in [0, 1), got {self.beta}")

    def rule(self):
        return optax.sgd, {"momentum": self.beta}

    @property
    def stability(self) -> float:
        return 2.0 + 2.0 * self.beta


class Adam(AbstractOptimizer):
    """``optax.adam(b1=β₁)``: c = (2 + 2β₁)/(1 − β₁), 38 at β₁ = 0.9, the edge of
    stability of Adam's preconditioned sharpness (Cohen et al. 2022)."""

    beta: float = 0.9
    name: ClassVar[str] = "adam"

    def __check_init__(self):
        if not 0 <= self.beta < 1:
            raise ValueError(f"beta must lie in [0, 1), got {self.beta}")

    def rule(self):
        return optax.adam, {"b1": self.beta}

    @property
    def stability(self) -> float:
        return (2.0 + 2.0 * self.beta) / (1.0 - self.beta)


class AdamW(AbstractOptimizer):
    """``optax.adamw(b1=β₁, weight_decay=λ)``: decoupled weight decay. Its stability
    constant is Adam's (the decay adds λη to the curvature, negligible at λη ≪ 1)."""

    beta: float = 0.9
    weight_decay: float = 0.01
    name: ClassVar[str] = "adamw"

    def __check_init__(self):
        if not 0 <= self.beta < 1:
            raise ValueError(f"beta must lie in [0, 1), got {self.beta}")
        if not self.weight_decay >= 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")

    def rule(self):
        return optax.adamw, {"b1": self.beta, "weight_decay": self.weight_decay}

    @property
    def stability(self) -> float:
        return (2.0 + 2.0 * self.beta) / (1.0 - self.beta)


class _RMSPropState(NamedTuple):
    count: jax.Array
    nu: optax.Params


def rmsprop_from_first_gradient(
    learning_rate: float | jax.Array,
    decay: float | jax.Array = 0.9,
    eps: float | jax.Array = 1e-8,
) -> optax.GradientTransformation:
    """RMSProp whose average of squared gradients starts at the first one:

        ν_0 = g_0²,  ν_k = β ν_{k−1} + (1 − β) g_k²,  θ_{k+1} = θ_k − η g_k/√(ν_k + ε).

    optax's ``rmsprop`` starts from ν = 0, so its first steps have size η/√(1 − β)
    whatever the gradient; started at g_0² the method has the continuous limit
    dν/dt = (1 − β)/(βη)·(g² − ν), ν(0) = g(θ_0)² (the update is the implicit Euler
    step of it: ν_k − ν_{k−1} = (1 − β)/β·(g_k² − ν_k)), which its central flow
    (``gflow.dynamics.references.central_adaptive``) integrates.
    """

    def init(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return _RMSPropState(count=jnp.zeros([], jnp.int32), nu=zeros)

    def update(updates, state, params=None):
        first = state.count == 0
        nu = jax.tree.map(
            lambda g, n: jnp.where(first, g * g, decay * n + (1 - decay) * g * g),
            updates,
            state.nu,
        )
        step = jax.tree.map(
            lambda g, n: -learning_rate * g / jnp.sqrt(n + eps), updates, nu
        )
        return step, _RMSPropState(count=state.count + 1, nu=nu)

    return optax.GradientTransformation(init, update)


class RMSProp(AbstractOptimizer):
    """RMSProp with decay β (``rmsprop_from_first_gradient``): c = 2 on the
    preconditioned sharpness λ_max(diag(ν + ε)^{-1/2} H)."""

    beta: float = 0.9
    eps: float = 1e-8
    name: ClassVar[str] = "rmsprop"

    def __check_init__(self):
        if not 0 <= self.beta < 1:
            raise ValueError(f"beta must lie in [0, 1), got {self.beta}")
        if not self.eps >= 0:
            raise ValueError(f"eps must be >= 0, got {self.eps}")

    def rule(self):
        return rmsprop_from_first_gradient, {"decay": self.beta, "eps": self.eps}

    @property
    def stability(self) -> float:
        return 2.0


#: The one table where optimizer names become objects (configs and the CLI use it).
OPTIMIZERS: dict[str, type[AbstractOptimizer]] = {
    "sgd": SGD,
    "momentum": Momentum,
    "adam": Adam,
    "adamw": AdamW,
    "rmsprop": RMSProp,
}


def optimizer_named(
    name: str, beta: float = 0.9, weight_decay: float = 0.01, eps: float = 1e-8
) -> AbstractOptimizer:
    """The optimizer called ``name``: β is its momentum, β₁ or RMSProp's decay (SGD
    has none), ``weight_decay`` is AdamW's and ``eps`` RMSProp's ε."""
    if name not in OPTIMIZERS:
        raise ValueError(
            f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}"
        )
    return OPTIMIZERS[name].from_settings(beta=beta, weight_decay=weight_decay, eps=eps)
