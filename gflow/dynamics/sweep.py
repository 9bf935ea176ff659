"""Learning-rate sweeps: a grid of step sizes run as one compiled, vmapped program.

Every member runs the same optax optimizer (built with ``optax.inject_hyperparams``)
from the same initial model; only its hyperparameters, which live in the optimizer
state, differ. The step size is therefore a traced value: a new grid of η with the
same number of members does not recompile. Member m sits at flow time t = k·η_m after
k steps (MODEL.md §5) and is saved at the steps k_j = round(t_j / η_m) nearest to a
common time grid t_j, so that every member is compared with a reference at its own
exact times. A member that diverges (non-finite loss, gradient or parameters, or a
parameter norm above ``blowup``) freezes at its last good state, is marked
``diverged`` with its step, and never affects the others.

Every member also records the first step k at which its loss *rises*,
L(θ_k) > L(θ_{k−1}) (relative tolerance 100 ε of the dtype against round-off), and
how many steps rise. For GD this certifies an instability: by the descent lemma,
L(θ − η∇L) ≤ L(θ) − η(1 − ηλ/2)|∇L|² with λ the largest Hessian eigenvalue on the
segment, so the loss can only rise once ηλ_max > 2 somewhere on the step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jax.typing import DTypeLike
from jaxtyping import Array, ArrayLike, Float, Int, PyTree, Real, Scalar

from gflow.array_types import LossFn, Model, RealVector
from gflow.dynamics.optimizer_step import DEFAULT_BLOWUP, guarded_step
from gflow.dynamics.trajectory import Status, Trajectory

#: Name of the mesh axis that members are sharded over.
MEMBER_AXIS = "members"


def save_steps(lrs: RealVector, t1: float, num_saves: int) -> Int[np.ndarray, "M S"]:
    """Steps k_j = round(t_j / η) at which each member is saved, int [M, num_saves].

    t_j = linspace(0, t1, num_saves); member m is then at time k_j η_m, within η_m/2
    of t_j (exactly t_j when t_j is a multiple of η_m).
    """
    lrs = np.asarray(lrs, float)
    grid = np.linspace(0.0, float(t1), int(num_saves))
    steps = np.rint(grid[None, :] / lrs[:, None] + 1e-9).astype(np.int64)
    steps[:, -1] = np.maximum(steps[:, -1], 1)  # every member takes a step
    return np.maximum.accumulate(steps, axis=1)


def with_hyperparams(
    opt_state: PyTree, values: Mapping[str, Real[ArrayLike, ""]], dtype: DTypeLike
) -> PyTree:
    """``opt_state`` with the ``inject_hyperparams`` values replaced by ``values``."""
    if not isinstance(
        opt_state, (optax.InjectHyperparamsState, optax.InjectStatefulHyperparamsState)
    ):
        raise ValueError(
            "the sweep needs an optimizer built with optax.inject_hyperparams(...)() "
            "so that its learning rate lives in the optimizer state"
        )
    hyper = dict(opt_state.hyperparams)
    for name, value in values.items():
        if name not in hyper:
            raise ValueError(
                f"the optimizer has no injected hyperparameter {name!r}; it has "
                f"{sorted(hyper)}"
            )
        hyper[name] = jnp.asarray(value, dtype)
    return opt_state._replace(hyperparams=hyper)


@eqx.filter_jit
def sweep_core(
    params: PyTree,
    static: PyTree,
    opt_states: PyTree,
    steps_at: Int[Array, "M S"],
    loss_fn: LossFn,
    optimizer: optax.GradientTransformation,
    blowup: float | Scalar,
    max_loss_ratio: Float[Array, ""],
) -> tuple[
    Float[Array, "M S"], PyTree, Int[Array, " M"], Int[Array, " M"], Int[Array, " M"]
]:
    """The jitted sweep: vmapped over members (``opt_states``, ``steps_at`` [M, S]).

    ``blowup`` bounds the parameter norm and ``max_loss_ratio`` × the initial loss
    bounds the loss at the saves.

    Returns (loss [M, S], parameter snapshots [M, S, ...], diverged step [M], first
    step whose loss rose above the previous step's [M], number of such steps [M]);
    −1: none. Saves after a divergence are NaN.
    """
    dtype = jax.tree.leaves(params)[0].dtype
    rise_tol = 100 * jnp.finfo(dtype).eps  # relative: round-off is not a rise

    def loss_of(p):
        return loss_fn(eqx.combine(p, static))

    max_loss = max_loss_ratio * loss_of(params)

    def member(opt_state, targets):
        def advance(carry, target):
            def cond(c):
                return (c[3] < target) & (c[2] < 0)

            def body(c):
                p, s, bad_at, k, prev, first_rise, rises = c
                p, s, bad_at, loss, _ = guarded_step(
                    jax.value_and_grad(loss_of),
                    optimizer,
                    p,
                    s,
                    bad_at,
                    k,
                    blowup=blowup,
                )
                rose = (k > 0) & (loss > prev + rise_tol * jnp.abs(prev))
                first_rise = jnp.where(rose & (first_rise < 0), k, first_rise)
                return p, s, bad_at, k + 1, loss, first_rise, rises + rose

            p, s, bad_at, k, prev, first_rise, rises = jax.lax.while_loop(
                cond, body, carry
            )
            loss = loss_of(p)
            # the last state is checked here; the next body then sees prev == loss
            rose = (k > 0) & (loss > prev + rise_tol * jnp.abs(prev))
            first_rise = jnp.where(rose & (first_rise < 0), k, first_rise)
            blown = ~(loss <= max_loss) & (bad_at < 0)
            bad_at = jnp.where(blown, k, bad_at)
            carry = (p, s, bad_at, k, loss, first_rise, rises + rose)
            nan = jnp.asarray(jnp.nan, dtype)
            loss = jnp.where(bad_at >= 0, nan, loss)
            snap = jax.tree.map(lambda x: jnp.where(bad_at >= 0, nan, x), p)
            return carry, (loss, snap)

        minus_one = jnp.asarray(-1, jnp.int32)
        carry = (
            params,
            opt_state,
            minus_one,
            jnp.asarray(0, jnp.int32),
            loss_of(params),
            minus_one,
            jnp.asarray(0, jnp.int32),
        )
        carry, (loss, snaps) = jax.lax.scan(advance, carry, targets)
        return loss, snaps, carry[2], carry[5], carry[6]

    return jax.vmap(member)(opt_states, steps_at)


@dataclasses.dataclass(frozen=True)
class SweepRun:
    """The members of a sweep, before any comparison with a reference.

    Attributes:
        lrs: step sizes η_m, float [M].
        t: each member's saved times k_j η_m, float [M, S].
        steps: the saved steps k_j, int [M, S].
        loss: loss at the saved times, float [M, S] (NaN after a divergence).
        params: parameter snapshots, the model with leading axes [M, S, ...].
        diverged_step: the step at which each member diverged, int [M] (−1: none).
        info: what produced the run.
        first_rise_step: the first step k with L(θ_k) > L(θ_{k−1}), int [M] (−1:
            the loss never rose); None if not recorded.
        rises: the number of steps at which the loss rose, int [M]; None if not
            recorded.
    """

    lrs: Float[np.ndarray, " M"]
    t: Float[np.ndarray, "M S"]
    steps: Int[np.ndarray, "M S"]
    loss: Float[np.ndarray, "M S"]
    params: PyTree
    diverged_step: Int[np.ndarray, " M"]
    info: dict = dataclasses.field(default_factory=dict)
    first_rise_step: Int[np.ndarray, " M"] | None = None
    rises: Int[np.ndarray, " M"] | None = None

    def first_rise_time(self, m: int) -> float | None:
        """Flow time k·η of member m's first loss rise (None: none or unrecorded)."""
        if self.first_rise_step is None or self.first_rise_step[m] < 0:
            return None
        return float(self.first_rise_step[m] * self.lrs[m])

    def status(self, m: int) -> Status:
        """Member m's status: ``"success"`` or ``"diverged"`` (``STATUSES``)."""
        return "diverged" if self.diverged_step[m] >= 0 else "success"

    def member(self, m: int) -> Trajectory:
        """Member m as a Trajectory (its saves up to a divergence)."""
        n = len(self.t[m])
        params = jax.tree.map(lambda x: x[m] if eqx.is_array(x) else x, self.params)
        status = self.status(m)
        stats = {"steps": int(self.steps[m, -1])}
        if status == "diverged":
            stats["diverged_step"] = int(self.diverged_step[m])
            n = max(1, int(np.argmin(np.isfinite(self.loss[m]))))  # saves before
            params = jax.tree.map(lambda x: x[:n] if eqx.is_array(x) else x, params)
        final = jax.tree.map(lambda x: x[n - 1] if eqx.is_array(x) else x, params)
        return Trajectory(
            t=self.t[m, :n],
            metrics={"loss": self.loss[m, :n]},
            final=final,
            params=params,
            status=status,
            stats=stats,
            info={"kind": "optimizer", "lr": float(self.lrs[m]), **self.info},
        )


def member_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A one-axis mesh over ``devices`` (default: all local devices)."""
    devices = jax.devices() if devices is None else list(devices)
    return Mesh(np.asarray(devices), (MEMBER_AXIS,))


def run_sweep(
    loss_fn: LossFn,
    model: Model,
    optimizer: optax.GradientTransformation,
    lrs: RealVector,
    *,
    t1: float,
    num_saves: int = 101,
    hyperparams: Callable[[float], dict] | None = None,
    blowup: float = DEFAULT_BLOWUP,
    max_loss_ratio: float = 10.0,
    mesh: Mesh | None = None,
) -> SweepRun:
    """Run ``optimizer`` at every step size in ``lrs`` up to flow time ``t1``.

    Args:
        loss_fn: ``loss_fn(model) -> scalar`` (an eqx.Module, so it is traced).
        model: the initial model, shared by all members.
        optimizer: built with ``optax.inject_hyperparams``; its injected
            ``learning_rate`` is replaced per member.
        lrs: step sizes η_m > 0, float [M].
        t1: final flow time; member m runs round(t1/η_m) steps.
        num_saves: saved times per member (a common grid from 0 to t1).
        hyperparams: ``η -> {name: value}`` for the injected hyperparameters of a
            member (default ``{"learning_rate": η}``); e.g. β = 1 − γη.
        blowup: a parameter norm above this counts as divergence.
        max_loss_ratio: a saved loss above this times the initial loss counts as
            divergence (a blow-up that stays finite: cross-entropy grows only
            linearly in the logits).
        mesh: a one-axis ``jax.sharding.Mesh`` (axis ``"members"``) to shard the
            members over; members are padded to a multiple of its size.

    Returns:
        A SweepRun.
    """
    lrs = np.asarray(lrs, float).ravel()
    if lrs.size == 0 or not np.all(np.isfinite(lrs) & (lrs > 0)):
        raise ValueError(f"lrs must be positive numbers, got {lrs.tolist()}")
    if not t1 > 0:
        raise ValueError(f"t1 must be > 0, got {t1}")
    if num_saves < 2:
        raise ValueError(f"num_saves must be >= 2, got {num_saves}")
    hyperparams = hyperparams or (lambda lr: {"learning_rate": lr})
    params, static = eqx.partition(model, eqx.is_inexact_array)
    dtype = jax.tree.leaves(params)[0].dtype
    state0 = optimizer.init(params)
    steps = save_steps(lrs, t1, num_saves)
    n = lrs.size
    pad = 0 if mesh is None else -n % mesh.size
    padded = np.concatenate([lrs, np.repeat(lrs[-1:], pad)])
    states = [with_hyperparams(state0, hyperparams(float(lr)), dtype) for lr in padded]
    states = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
    steps_at = jnp.asarray(np.concatenate([steps, np.repeat(steps[-1:], pad, 0)]))
    if mesh is not None:
        sharded = NamedSharding(mesh, PartitionSpec(MEMBER_AXIS))
        states, steps_at = jax.device_put((states, steps_at), sharded)
        params = jax.device_put(params, NamedSharding(mesh, PartitionSpec()))
    loss, snaps, bad_at, first_rise, rises = sweep_core(
        params,
        static,
        states,
        steps_at,
        loss_fn,
        optimizer,
        blowup,
        jnp.asarray(max_loss_ratio, dtype),
    )
    snaps = jax.tree.map(lambda x: np.asarray(x)[:n], snaps)
    return SweepRun(
        lrs=lrs,
        t=steps * lrs[:, None],
        steps=steps,
        loss=np.asarray(loss)[:n],
        params=eqx.combine(snaps, static),
        diverged_step=np.asarray(bad_at)[:n],
        info={"t1": float(t1), "sharded_over": 1 if mesh is None else mesh.size},
        first_rise_step=np.asarray(first_rise)[:n],
        rises=np.asarray(rises)[:n],
    )
