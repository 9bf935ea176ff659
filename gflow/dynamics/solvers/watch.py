"""A solver wrapper that watches the step size: what a stalled solve reports, and the
progress line (t, step size, method in use, ρ) of ``solve_flow``.

Diffrax's progress meters see only the fraction of [t0, t1] done, and its solution
does not keep the step size. ``Watched`` passes every call through to the solver it
wraps, and carries beside the solver's state the last attempted step, the smallest
attempted step (the last step, clipped to end at t1, left out) and a step count.
With ``show`` set, a host callback writes one line above the progress bar at the
``refresh``-th attempted step, then at twice as many steps each time (at most about
20 lines to a million steps, however long the solve), whenever the method changes,
and, for a solve whose steps are slow, once ``every_s`` seconds of wall time have
passed since the last line (asked every ``check_every`` attempted steps):

    t = 4.0312 / 20 (20.2%)  h = 3.1e-04  Tsit5  ρ ≈ 7.7e+03  step 1600

The method is the solver's ``method_names[method_in_use(state, h)]`` where it has
them (AutoSwitch: Tsit5 or EXPRB32; StiffSwitch: Tsit5 or RKC2), else its class
name; ρ is the solver's own spectral-radius estimate where its state has one.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from diffrax._root_finder import use_stepsize_tol  # what diffeqsolve checks for
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PyTree, Real


class WatchState(eqx.Module):
    """The wrapped solver's state and what ``Watched`` records beside it."""

    inner: PyTree
    last_step: Float[Array, ""]  # the last attempted step h
    smallest_step: Float[Array, ""]  # the smallest attempted step not ending at t1
    count: Int[Array, ""]  # attempted steps
    next_report: Int[Array, ""]  # the step count of the next progress line
    method: Int[Array, ""]  # index of the method of the last attempted step


def method_names(solver: diffrax.AbstractSolver) -> tuple[str, ...]:
    """The names of the methods a solver may use (its class name if it has one)."""
    return getattr(solver, "method_names", (type(solver).__name__,))


def method_in_use(
    solver: diffrax.AbstractSolver, state: PyTree, h: Real[ArrayLike, ""]
) -> Int[Array, ""]:
    """Index into ``method_names(solver)`` of the method its next step uses."""
    fn = getattr(solver, "method_in_use", None)
    return jnp.zeros((), jnp.int32) if fn is None else fn(state, h)


def solver_rho(state: PyTree) -> Float[Array, ""] | None:
    """The solver's own spectral-radius estimate ρ in its state, or None."""
    rho = getattr(state, "rho", None)
    return None if rho is None else jnp.asarray(rho)


def progress_line(
    t: float, t0: float, t1: float, h: float, method: str, rho: float, count: int
) -> str:
    """One progress line: t, the fraction of [t0, t1] done, h, the method, ρ."""
    frac = 100.0 * (t - t0) / (t1 - t0) if t1 > t0 else 100.0
    line = f"t = {t:.6g} / {t1:g} ({frac:.1f}%)  h = {h:.2e}  {method}"
    if np.isfinite(rho):
        line += f"  ρ ≈ {rho:.2e}"
    return line + f"  step {count}"


def _show(due, t, t0, t1, h, index, rho, count, *, names, clock, every_s):
    """Host side of the progress line, written above tqdm's bar where there is one:
    always when ``due`` (a step-count line or a change of method), else only once
    ``every_s`` seconds have passed since ``clock``'s last line."""
    now = time.monotonic()
    if not (bool(due) or now - clock["last"] >= every_s):
        return
    clock["last"] = now
    text = progress_line(
        float(t),
        float(t0),
        float(t1),
        float(h),
        names[int(index)],
        float(rho),
        int(count),
    )
    try:
        from tqdm import tqdm
    except ImportError:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    else:
        tqdm.write(text, file=sys.stderr)


_TOLERANCES = ("rtol", "atol", "norm")


def unset_tolerances(solver: diffrax.AbstractSolver) -> tuple[str, ...]:
    """The root-finder tolerances an implicit solver leaves to the step-size
    controller (``diffrax.use_stepsize_tol``); () for an explicit solver."""
    if not isinstance(solver, diffrax.AbstractImplicitSolver):
        return ()
    finder = solver.root_finder
    return tuple(a for a in _TOLERANCES if getattr(finder, a, None) is use_stepsize_tol)


def with_stepsize_tolerances(
    solver: diffrax.AbstractSolver,
    controller: diffrax.AbstractStepSizeController,
) -> diffrax.AbstractSolver | None:
    """``solver`` with its root finder's tolerances that it leaves to the step-size
    controller set to the controller's, as ``diffrax.diffeqsolve`` sets them (so a
    solve of the result is the solve Diffrax would make of ``solver``); None when
    some are unset and ``controller`` is not adaptive (Diffrax then refuses the
    solver itself). Explicit solvers and set tolerances are returned as they are.
    """
    unset = unset_tolerances(solver)
    if not unset:
        return solver
    if not isinstance(controller, diffrax.AbstractAdaptiveStepSizeController):
        return None
    return eqx.tree_at(
        lambda s: tuple(getattr(s.root_finder, a) for a in unset),
        solver,
        tuple(getattr(controller, a) for a in unset),
    )


class Watched(diffrax.AbstractSolver):
    """``solver``'s steps, with the step size recorded and (``show``) a progress line.

    Attributes:
        solver: the solver that takes the steps. An implicit one must have its
            root finder's tolerances set: Diffrax fills those left to the step-size
            controller (``use_stepsize_tol``) only in a solver it sees, not in one
            wrapped here; ``with_stepsize_tolerances`` fills them as Diffrax does.
        t_start, t_end: the solve's interval (Diffrax's ``init`` sees only the
            first step's), for the progress fraction and to tell the last step.
        show: write progress lines (at ``refresh``, 2 ``refresh``, 4 ``refresh``, ...
            attempted steps, where the method changes, and ``every_s`` seconds of
            wall time after the last line).
        refresh: the attempted step of the first progress line.
        every_s: the most seconds between two progress lines of a solve whose
            steps are slow (checked every ``check_every`` attempted steps, so a
            line may come later where ``check_every`` steps take longer).
        interrupt: a host function asked every ``check_every`` attempted steps (a
            host callback); once it returns true the step ends the solve (Diffrax
            stops at a result that is not successful: ``internal_error`` here, so
            ``interrupt`` must stay true once it is, and the caller tells the two
            apart by asking it again). None: not asked.
        check_every: attempted steps between two calls of ``interrupt``.
    """

    solver: diffrax.AbstractSolver
    t_start: Real[ArrayLike, ""]
    t_end: Real[ArrayLike, ""]
    show: bool = eqx.field(static=True, default=False)
    refresh: int = eqx.field(static=True, default=100)
    every_s: float = eqx.field(static=True, default=60.0)
    interrupt: Callable[[], bool] | None = eqx.field(static=True, default=None)
    check_every: int = eqx.field(static=True, default=32)

    def __check_init__(self):
        if unset_tolerances(self.solver):
            raise ValueError(
                f"Watched cannot wrap {type(self.solver).__name__} with its root "
                f"finder's {', '.join(unset_tolerances(self.solver))} left to the "
                "step-size controller: fill them first (with_stepsize_tolerances)"
            )
        if self.refresh < 1:
            raise ValueError(f"refresh must be >= 1, got {self.refresh}")
        if self.check_every < 1:
            raise ValueError(f"check_every must be >= 1, got {self.check_every}")
        if not self.every_s >= 0:
            raise ValueError(f"every_s must be >= 0, got {self.every_s}")

    @property
    def term_structure(self):
        return self.solver.term_structure

    @property
    def interpolation_cls(self) -> Callable:  # type: ignore[override]
        return self.solver.interpolation_cls

    def order(self, terms: PyTree[diffrax.AbstractTerm]) -> int | None:
        return self.solver.order(terms)

    def error_order(self, terms: PyTree[diffrax.AbstractTerm]) -> float | None:
        return self.solver.error_order(terms)

    def init(
        self,
        terms: PyTree[diffrax.AbstractTerm],
        t0: Real[ArrayLike, ""],
        t1: Real[ArrayLike, ""],
        y0: PyTree,
        args: PyTree,
    ) -> WatchState:
        dtype = jnp.result_type(*jax.tree.leaves(y0), jnp.asarray(t0))
        inf = jnp.asarray(jnp.inf, dtype)
        return WatchState(
            inner=self.solver.init(terms, t0, t1, y0, args),
            last_step=inf,
            smallest_step=inf,
            count=jnp.zeros((), jnp.int32),
            next_report=jnp.asarray(self.refresh, jnp.int32),
            method=jnp.zeros((), jnp.int32),
        )

    def step(
        self,
        terms: PyTree[diffrax.AbstractTerm],
        t0: Real[ArrayLike, ""],
        t1: Real[ArrayLike, ""],
        y0: PyTree,
        args: PyTree,
        solver_state: WatchState,
        made_jump: Bool[ArrayLike, ""],
    ) -> tuple[PyTree, PyTree, dict[str, PyTree], WatchState, diffrax.RESULTS]:
        st = solver_state
        h = jnp.asarray(t1 - t0, st.last_step.dtype)
        index = method_in_use(self.solver, st.inner, h)
        due = (st.count == st.next_report) | ((index != st.method) & (st.count > 0))
        if self.show:
            rho = solver_rho(st.inner)
            rho = jnp.asarray(jnp.nan if rho is None else rho, h.dtype)
            names = method_names(self.solver)
            # the host's time of the last line of this compiled solve (made once,
            # when the step is traced)
            clock = {"last": time.monotonic()}
            every_s = self.every_s

            def show():
                jax.debug.callback(
                    lambda *a: _show(*a, names=names, clock=clock, every_s=every_s),
                    due,
                    t0,
                    self.t_start,
                    self.t_end,
                    h,
                    index,
                    rho,
                    st.count,
                )

            tick = st.count % self.check_every == 0
            jax.lax.cond(due | tick, show, lambda: None)
        y1, y_error, dense_info, inner, result = self.solver.step(
            terms, t0, t1, y0, args, st.inner, made_jump
        )
        if self.interrupt is not None:
            ask = self.interrupt

            def asked():
                return jax.pure_callback(
                    lambda: np.asarray(bool(ask())),
                    jax.ShapeDtypeStruct((), jnp.bool_),
                )

            # a rejected step keeps the old count, so the next attempt asks again
            stop = jax.lax.cond(
                st.count % self.check_every == 0, asked, lambda: jnp.asarray(False)
            )
            # a result that is not "okay" (an event's would be overwritten by the
            # controller's): the solve ends; the caller asks ``interrupt`` again
            result = diffrax.RESULTS.where(stop, diffrax.RESULTS.internal_error, result)
        clipped = t1 >= self.t_end  # the step that ends the solve may be cut short
        new = WatchState(
            inner=inner,
            last_step=jnp.where(clipped, st.last_step, h),
            smallest_step=jnp.where(
                clipped, st.smallest_step, jnp.minimum(st.smallest_step, h)
            ),
            count=st.count + 1,
            next_report=jnp.where(
                st.count == st.next_report, 2 * st.next_report, st.next_report
            ),
            method=index,
        )
        return y1, y_error, dense_info, new, result

    def func(
        self,
        terms: PyTree[diffrax.AbstractTerm],
        t0: Real[ArrayLike, ""],
        y0: PyTree,
        args: PyTree,
    ) -> PyTree:
        return self.solver.func(terms, t0, y0, args)
