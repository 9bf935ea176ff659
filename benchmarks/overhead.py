"""gflow's own cost: per gradient evaluation, and against a plain Diffrax solve
(issues 5 and 12).

Two measurements on the default flow, each in one process:

1. **Physical limit.** Warm gradient evaluations per second of each solver
   (``solve_flow`` to t1 = 400, wall time over its gradient evaluations) against a
   bare jitted gradient: N gradients chained inside one jitted ``lax.fori_loop``
   (pure compute: the most a solver could reach) and a jitted gradient called from
   Python (what a hand-written loop pays).
2. **Overhead against plain Diffrax** (issue 12, item 2): ``solve_flow`` against
   ``diffrax.diffeqsolve`` of the same loss written by hand on a tuple of matrices
   (W_E, W_Q, W_K, W_P), with the same solver object, PID controller, tolerances and
   201 saved times at which the loss and gradient norm are evaluated inside the loop.
   Target: at most 1.1x, at t1 = 400 and t1 = 3000.

Every row carries the 1-minute load average at which it was taken. Writes
results/overhead.json.
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from gflow import MarkovChain, solve_flow
from gflow.analysis import flatten
from gflow.dynamics.solvers import (
    EXPRB32,
    RKC2,
    ROCK4,
    AutoSwitch,
    SplitRKC2,
    StiffSwitch,
)

from .common import default_problem, load1, save, timed


def _plain_loss(mats, P, pi):
    """The population loss of MarkovChain.default() on (W_E, W_Q, W_K, W_P), τ = 1."""
    W_E, W_Q, W_K, W_P = mats
    Phi = (W_E @ W_Q) @ (W_E @ W_K).T  # [d, d]
    attn = jax.nn.softmax(Phi + jnp.log(pi)[None, :], axis=-1)
    logp = jax.nn.log_softmax(attn @ (W_E @ W_P), axis=-1)
    return -jnp.sum(pi[:, None] * P * logp)


@eqx.filter_jit
def _plain_solve(mats, P, pi, solver, t1, ts, rtol, atol):
    def loss(y):
        return _plain_loss(y, P, pi)

    def field(t, y, args):
        return jax.tree.map(jnp.negative, jax.grad(loss)(y))

    def save_fn(t, y, args):
        g = jax.grad(loss)(y)
        norm = jnp.sqrt(sum(jnp.sum(x**2) for x in jax.tree.leaves(g)))
        return {"loss": loss(y), "grad_norm": norm}

    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(field),
        solver,
        t0=jnp.zeros_like(t1),
        t1=t1,
        dt0=None,
        y0=mats,
        saveat=diffrax.SaveAt(
            subs=[diffrax.SubSaveAt(ts=ts, fn=save_fn), diffrax.SubSaveAt(t1=True)]
        ),
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=1_000_000,
        throw=False,
    )
    return sol.ys, sol.stats["num_steps"]


def plain_vs_gflow(
    name, solver, *, t1: float, rtol: float = 1e-6, repeats: int = 3
) -> dict:
    """Warm wall times of solve_flow and of the plain Diffrax solve, back to back."""
    loss, model = default_problem()
    if model.tau != 1.0 or model.residual or model.W_K is None:
        raise ValueError("the plain loss is written for τ = 1, no residual, W_Q W_Kᵀ")
    chain = MarkovChain.default()
    P, pi = jnp.asarray(chain.P), jnp.asarray(chain.pi)
    mats = (model.W_E, model.W_Q, model.W_K, model.W_P)
    ts = jnp.linspace(0.0, t1, 201)
    dtype = model.W_E.dtype
    args = (jnp.asarray(t1, dtype), ts, jnp.asarray(rtol, dtype))

    def plain():
        return _plain_solve(mats, P, pi, solver, *args, jnp.asarray(rtol * 1e-2, dtype))

    def gflow():
        return solve_flow(
            loss,
            model,
            t1=t1,
            solver=solver,
            rtol=rtol,
            atol=rtol * 1e-2,
            progress=False,
        )

    plain(), gflow()
    load = load1()
    walls = {"plain": np.inf, "gflow": np.inf}
    for _ in range(repeats):  # interleaved, so that a change of load hits both
        (_, steps), w = timed(plain)
        walls["plain"] = min(walls["plain"], w)
        tr, w = timed(gflow)
        walls["gflow"] = min(walls["gflow"], w)
    row = {
        "t1": t1,
        "solver": name,
        "gflow_s": walls["gflow"],
        "plain_diffrax_s": walls["plain"],
        "gflow_over_plain": walls["gflow"] / walls["plain"],
        "num_steps_gflow": tr.stats["num_steps"],
        "num_steps_plain": int(steps),
        "load_1min": load,
    }
    print(f"  {name} t1={t1:g}: {row}", flush=True)
    return row


def per_gradient(
    loss, model, *, t1: float, n: int, repeats: int, solvers: dict, rtol=None, ts=None
) -> dict:
    """Warm cost of one gradient evaluation inside each solver against a bare one.

    The bare gradient is timed twice: ``n`` chained inside one jitted
    ``lax.fori_loop`` (the most a solver could reach) and called from Python. Each
    solver runs ``solve_flow`` to ``t1`` once to compile, then ``repeats`` times;
    its cost per evaluation is the fastest wall time over its gradient evaluations.
    ``ts``: the save times (None: ``solve_flow``'s 201; each save evaluates the
    loss and the gradient's norm, which the solver's count does not include).
    """
    x0, unravel = flatten(model)
    grad = jax.jit(jax.grad(lambda x: loss(unravel(x))))
    grad(x0).block_until_ready()

    def python_loop():
        x = x0
        for _ in range(n):
            x = x - 1e-6 * grad(x)
        return x

    @jax.jit
    def fused(x):
        g = jax.grad(lambda z: loss(unravel(z)))
        return jax.lax.fori_loop(0, n, lambda i, z: z - 1e-6 * g(z), x)

    fused(x0).block_until_ready()
    load = load1()
    _, t_py = timed(python_loop, repeats=repeats)
    _, t_fused = timed(lambda: fused(x0), repeats=repeats)
    rows = {
        "bare_python_call_us": 1e6 * t_py / n,
        "bare_fused_us": 1e6 * t_fused / n,
        "bare_load_1min": load,
    }
    options = {} if rtol is None else {"rtol": rtol, "atol": rtol * 1e-2}
    if ts is not None:
        options["ts"] = ts
    for name, solver in solvers.items():

        def solve(solver=solver):
            return solve_flow(
                loss, model, t1=t1, solver=solver, progress=False, **options
            )

        timed(solve)
        load = load1()
        tr, wall = timed(solve, repeats=repeats)
        per = 1e6 * wall / tr.stats["grad_evals"]
        rows[name] = {
            "wall_s": wall,
            "grad_evals": tr.stats["grad_evals"],
            "us_per_grad_eval": per,
            "grad_evals_per_s": 1e6 / per,
            "ratio_vs_fused": per / rows["bare_fused_us"],
            "ratio_vs_python_call": per / rows["bare_python_call_us"],
            "load_1min": load,
        }
        print(f"  {name}: {rows[name]}", flush=True)
    return rows


def _solvers() -> dict:
    return {
        "tsit5": diffrax.Tsit5(),
        "auto": AutoSwitch(),
        "stiff_switch": StiffSwitch(),
        "rkc2": RKC2(),
        "split_rkc2": SplitRKC2(),
        "rock4": ROCK4(),
        "exprb32": EXPRB32(),
    }


def run(
    *,
    t1: float = 400.0,
    n: int = 2000,
    repeats: int = 3,
    plain_runs=(("auto", 400.0), ("auto", 3000.0), ("tsit5", 400.0)),
    plain_repeats: int = 2,
) -> dict:
    loss, model = default_problem()
    solvers = _solvers()
    rows = per_gradient(loss, model, t1=t1, n=n, repeats=repeats, solvers=solvers)
    plain = [
        plain_vs_gflow(name, solvers[name], t1=t, repeats=plain_repeats)
        for name, t in plain_runs
    ]
    record = {"t1": t1, "n_bare": n, "rows": rows, "plain_diffrax": plain}
    save("overhead", record)
    return record
