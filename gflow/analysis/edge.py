"""The edge of stability seen from two extra forward passes: the curvature along the
update an optimizer is about to take, against that optimizer's stability bound.

After the critical-sharpness idea of arXiv 2601.16979 (the critical learning rate,
the smallest one whose step raises the loss, found by a search along the update
direction with forward passes only, no Hessian-vector product). Here, for the update
u that the optimizer applies at this step (θ ← θ + u; optax's ``updates``), the loss
along it, ℓ(s) = L(θ + s u), is fitted by the parabola through s = 0, 1, 2:

    ℓ(s) ≈ ℓ₀ + b s + a s²,   a = (ℓ₂ − 2ℓ₁ + ℓ₀) / 2,   b = (4ℓ₁ − ℓ₂ − 3ℓ₀) / 2,

exact for a quadratic loss, where b = ∇Lᵀu and a = uᵀHu / 2. From it:

- ``critical_step`` s_c = −b / a: the multiple of the update past which the loss
  ends above ℓ₀ (∞ when a ≤ 0: no rise along u); s_c < 1 means this very step
  overshoots along its own direction, the critical-sharpness paper's signal;
- ``sharpness`` κ = uᵀHu / uᵀPu = 2a / ‖u‖²_P: the curvature along u measured in
  the optimizer's own metric P (the identity for GD and heavy ball, Adam's
  preconditioner diag(√v̂ + ε) for Adam). κ is a Rayleigh quotient of P⁻¹H, so
  κ ≤ λ_max(P⁻¹H), the (preconditioned) sharpness whose bound decides stability;
- ``threshold`` c / η with the optimizer's constant c (``gflow.analysis.sharpness``:
  2 for GD, 2 + 2β for heavy ball with momentum β, (2 + 2β₁)/(1 − β₁) ≈ 38 for Adam
  at β₁ = 0.9; Cohen et al., arXiv 2207.14484), and ``ratio`` κ / threshold: at 1
  the update has reached the edge along its own direction.

The rules (``GDEdge``, ``MomentumEdge``, ``AdamEdge``) are strategies that know the
constant and the metric; ``edge_reading`` is the arithmetic, framework-free, and
``edge_losses`` the JAX evaluation of ℓ₀, ℓ₁, ℓ₂ on pytrees.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

__all__ = [
    "AbstractEdge",
    "AdamEdge",
    "EdgeReading",
    "GDEdge",
    "MomentumEdge",
    "edge_losses",
    "edge_reading",
]


@dataclass(frozen=True)
class EdgeReading:
    """One measurement of the curvature along an update (module docstring)."""

    losses: tuple[float, float, float]  # ℓ(0), ℓ(1), ℓ(2)
    slope: float  # b = ∇Lᵀu (fitted)
    curvature: float  # uᵀHu = 2a (fitted)
    critical_step: float  # s_c = −b/a; inf when the loss does not rise along u
    sharpness: float  # κ = uᵀHu / uᵀPu
    threshold: float  # c / η
    ratio: float  # κ / threshold

    def to_dict(self) -> dict[str, Any]:
        return {
            "losses": list(self.losses),
            "slope": self.slope,
            "curvature": self.curvature,
            "critical_step": self.critical_step,
            "sharpness": self.sharpness,
            "threshold": self.threshold,
            "ratio": self.ratio,
        }


def edge_reading(
    losses: tuple[float, float, float] | list[float],
    update_norm2: float,
    threshold: float,
) -> EdgeReading:
    """The parabola through ℓ(0), ℓ(1), ℓ(2) read as curvature, critical step and
    ratio to ``threshold``; ``update_norm2`` = ‖u‖²_P > 0."""
    l0, l1, l2 = (float(x) for x in losses)
    if not all(math.isfinite(x) for x in (l0, l1, l2)):
        raise ValueError(f"the losses along the update must be finite, got {losses}")
    if not update_norm2 > 0:
        raise ValueError(f"the update must be non-zero (‖u‖² = {update_norm2})")
    if not threshold > 0:
        raise ValueError(f"threshold must be > 0, got {threshold}")
    a = (l2 - 2 * l1 + l0) / 2
    b = (4 * l1 - l2 - 3 * l0) / 2
    critical = -b / a if a > 0 else math.inf
    sharpness = 2 * a / update_norm2
    return EdgeReading(
        losses=(l0, l1, l2),
        slope=b,
        curvature=2 * a,
        critical_step=critical,
        sharpness=sharpness,
        threshold=float(threshold),
        ratio=sharpness / threshold,
    )


def _positive(name, value) -> float:
    value = float(value)
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


class AbstractEdge(ABC):
    """An optimizer's stability bound c/η and its metric ‖u‖²_P."""

    lr: float

    @property
    @abstractmethod
    def constant(self) -> float:
        """c in the bound c / η."""

    @property
    def threshold(self) -> float:
        return self.constant / self.lr

    def update_norm2(self, update, opt_state=None) -> float:
        """‖u‖²_P of the update pytree (P = I here)."""
        leaves = [np.asarray(x, float) for x in jax.tree.leaves(update)]
        return float(sum(np.sum(x * x) for x in leaves))


@dataclass(frozen=True)
class GDEdge(AbstractEdge):
    """Gradient descent at learning rate ``lr``: c = 2, P = I."""

    lr: float

    def __post_init__(self):
        _positive("lr", self.lr)

    @property
    def constant(self) -> float:
        return 2.0


@dataclass(frozen=True)
class MomentumEdge(AbstractEdge):
    """Heavy ball (optax ``sgd(lr, momentum=beta)``): c = 2 + 2β, P = I."""

    lr: float
    beta: float = 0.9

    def __post_init__(self):
        _positive("lr", self.lr)
        if not 0 <= self.beta < 1:
            raise ValueError(f"beta must lie in [0, 1), got {self.beta}")

    @property
    def constant(self) -> float:
        return 2 + 2 * self.beta


@dataclass(frozen=True)
class AdamEdge(AbstractEdge):
    """Adam/AdamW: c = (2 + 2β₁)/(1 − β₁), P = diag(√v̂ + ε) from the optax state's
    second moment ``nu`` and ``count`` (v̂ = ν / (1 − β₂^count))."""

    lr: float
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8

    def __post_init__(self):
        _positive("lr", self.lr)
        if not (0 <= self.b1 < 1 and 0 <= self.b2 < 1):
            raise ValueError(f"b1, b2 must lie in [0, 1), got {self.b1}, {self.b2}")

    @property
    def constant(self) -> float:
        return (2 + 2 * self.b1) / (1 - self.b1)

    def update_norm2(self, update, opt_state=None) -> float:
        if opt_state is None:
            raise ValueError("AdamEdge needs the optimizer state (its second moment)")
        nu = optax.tree_utils.tree_get(opt_state, "nu")
        count = optax.tree_utils.tree_get(opt_state, "count")
        if nu is None or count is None:
            raise ValueError("the optimizer state holds no Adam moments (nu, count)")
        correction = 1 - self.b2 ** max(int(count), 1)
        u = [np.asarray(x, float) for x in jax.tree.leaves(update)]
        v = [np.asarray(x, float) for x in jax.tree.leaves(nu)]
        if len(u) != len(v):
            raise ValueError("the update and the state's nu have other structures")
        return float(
            sum(
                np.sum(x * x * (np.sqrt(w / correction) + self.eps))
                for x, w in zip(u, v)
            )
        )


@eqx.filter_jit
def _losses(loss: Callable, model, update, args):
    arrays, static = eqx.partition(model, eqx.is_inexact_array)

    def along(s):
        moved = jax.tree.map(lambda p, u: p + s * u.astype(p.dtype), arrays, update)
        return loss(eqx.combine(moved, static), *args)

    return jnp.stack([along(0.0), along(1.0), along(2.0)])


def edge_losses(loss: Callable, model, update, *args) -> tuple[float, float, float]:
    """ℓ(0), ℓ(1), ℓ(2) = loss(model + s·update, *args) in one jitted call (three
    forward passes); ``update`` has the structure of the model's inexact arrays
    (optax's ``updates`` of ``eqx.filter(model, eqx.is_inexact_array)``). Pass the
    data as ``args`` and keep ``loss`` one function, so the call compiles once."""
    out = np.asarray(_losses(loss, model, update, args), float)
    return float(out[0]), float(out[1]), float(out[2])
