"""Work-precision of Diffrax solvers and gflow's own solvers (RKC2, ROCK4, EXPRB32,
StiffSwitch and the default AutoSwitch) on the default flow.

Each solver × tolerance integrates the default flow over [0, t1]; the error is the
largest relative parameter distance to a Dopri8 rtol-1e-12 reference over 16 saved
times. Cost: gradient evaluations and wall time (each solver compiled once, before
timing, its compile time recorded apart). Also a stiffness trace along the flow to
t = 3000: λ_max of the Hessian (Lanczos) times the mean step of Tsit5 and of
StiffSwitch on each interval. Writes results/work_precision.json,
results/stiffness_trace.json and the figures work_precision.png, stiffness.png.
"""

from __future__ import annotations

import time

import diffrax
import jax
import numpy as np

from gflow import solve_flow
from gflow.analysis import max_eigenvalue
from gflow.dynamics.solvers import EXPRB32, RKC2, ROCK4, AutoSwitch, StiffSwitch

from .common import RESULTS, default_problem, flat, load1, save


def _err(tr, ref) -> float:
    scale = max(np.linalg.norm(flat(ref.final)), 1e-300)
    errs = [
        np.linalg.norm(flat(_snap(tr, i)) - flat(_snap(ref, i)))
        for i in range(len(ref.t))
    ]
    return float(max(errs) / scale)


def _snap(tr, i):
    return tr.snapshot(i)


def solvers(quick: bool, implicit: bool = False):
    """The solvers of the grid; Diffrax's implicit Kvaerno5 only with ``implicit``
    (by far the slowest solver of the grid on 2 cores, and multithreaded, so its rows
    load the machine above 1.5 by themselves)."""
    out = {
        "euler": (diffrax.Euler(), "dt"),
        "heun": (diffrax.Heun(), "rtol"),
        "bosh3": (diffrax.Bosh3(), "rtol"),
        "tsit5": (diffrax.Tsit5(), "rtol"),
        "dopri5": (diffrax.Dopri5(), "rtol"),
        "dopri8": (diffrax.Dopri8(), "rtol"),
        "rkc2": (RKC2(), "rtol"),
        "rock4": (ROCK4(), "rtol"),
        "exprb32": (EXPRB32(), "rtol"),
        "stiff_switch": (StiffSwitch(), "rtol"),
        "auto": (AutoSwitch(), "rtol"),
    }
    if implicit and not quick:
        out["kvaerno5"] = (diffrax.Kvaerno5(), "rtol")
    return out


def run(*, t1: float = 150.0, quick: bool = True, implicit: bool = False) -> dict:
    loss, model = default_problem()
    ts = np.linspace(0.0, t1, 16)
    kw = dict(t1=t1, ts=ts, save_params=True, progress=False)
    ref = solve_flow(loss, model, solver=diffrax.Dopri8(), rtol=1e-12, atol=1e-14, **kw)
    rtols = (1e-4, 1e-6, 1e-8) if quick else (1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9)
    dts = (0.2, 0.05, 0.0125) if quick else (0.4, 0.2, 0.1, 0.05, 0.025, 0.0125)
    rows = {}
    for name, (solver, mode) in solvers(quick, implicit).items():
        grid = dts if mode == "dt" else rtols
        rows[name] = {"mode": mode, "points": []}
        for j, value in enumerate(grid):
            if mode == "dt":
                extra = dict(
                    dt0=value,
                    stepsize_controller=diffrax.ConstantStepSize(),
                    # one budget for every dt: max_steps is static, a new one recompiles
                    max_steps=int(t1 / min(dts)) + 10,
                )
            else:
                extra = dict(rtol=value, atol=value * 1e-2)
            start = time.perf_counter()
            tr = solve_flow(loss, model, solver=solver, **extra, **kw)
            first = time.perf_counter() - start
            if j == 0:  # the first call compiled; time it again warm
                start = time.perf_counter()
                tr = solve_flow(loss, model, solver=solver, **extra, **kw)
                rows[name]["compile_s"] = max(first - (time.perf_counter() - start), 0)
                first = time.perf_counter() - start
            point = {
                mode: value,
                "status": tr.status,
                "wall_s": first,
                "grad_evals": tr.stats["grad_evals"],
                "num_steps": tr.stats["num_steps"],
                "error": _err(tr, ref) if tr.status == "success" else None,
                "load_1min": load1(),
            }
            rows[name]["points"].append(point)
            print(f"  {name} {mode}={value:g}: {point}", flush=True)
    record = {"t1": t1, "reference": "dopri8 rtol 1e-12", "solvers": rows}
    save("work_precision", record)
    plot(record)
    return record


def stiffness_trace(*, t1: float = 3000.0, n: int = 31) -> dict:
    """λ_max and mean step sizes of Tsit5 and StiffSwitch on n-1 intervals.

    The starting points come from one StiffSwitch solve at rtol 1e-8 (more accurate
    than Tsit5 at 1e-6 and far cheaper to t = 3000); on each interval Tsit5 and
    StiffSwitch (both rtol 1e-6) restart from the same point.
    """
    loss, model = default_problem()
    ts = np.linspace(0.0, t1, n)
    base = solve_flow(
        loss,
        model,
        t1=t1,
        ts=ts,
        solver=StiffSwitch(),
        rtol=1e-8,
        atol=1e-10,
        save_params=True,
        progress=False,
    )
    lam, h_tsit, h_stiff = [], [], []
    v0 = None
    for i in range(n - 1):
        start = base.snapshot(i)
        ev, vec = max_eigenvalue(loss, start, key=jax.random.key(i), v0=v0)
        v0 = vec
        lam.append(float(ev))
        for out, solver in ((h_tsit, diffrax.Tsit5()), (h_stiff, StiffSwitch())):
            tr = solve_flow(
                loss,
                start,
                t0=ts[i],
                t1=ts[i + 1],
                ts=ts[i : i + 2],
                solver=solver,
                progress=False,
            )
            out.append((ts[i + 1] - ts[i]) / tr.stats["num_accepted_steps"])
        print(
            f"  t={ts[i]:g}: λ_max={lam[-1]:.4g}, h·λ Tsit5 "
            f"{h_tsit[-1] * lam[-1]:.3g}, StiffSwitch {h_stiff[-1] * lam[-1]:.3g}",
            flush=True,
        )
    record = {
        "t": ts[:-1].tolist(),
        "t1": t1,
        "lambda_max": lam,
        "h_tsit5": h_tsit,
        "h_stiff_switch": h_stiff,
        "h_lambda_tsit5": (np.array(h_tsit) * lam).tolist(),
        "h_lambda_stiff_switch": (np.array(h_stiff) * lam).tolist(),
    }
    save("stiffness_trace", record)
    plot_trace(record)
    return record


def plot(record) -> None:
    from gflow.plotting import plt, save_figure

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, row in record["solvers"].items():
        pts = [p for p in row["points"] if p["error"] is not None]
        if not pts:
            continue
        err = [p["error"] for p in pts]
        axes[0].loglog([p["grad_evals"] for p in pts], err, "o-", label=name)
        axes[1].loglog([p["wall_s"] for p in pts], err, "o-", label=name)
    axes[0].set_xlabel("gradient evaluations")
    axes[1].set_xlabel("wall time (s, compile excluded)")
    for ax in axes:
        ax.set_ylabel("max relative parameter error at saved times")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"work-precision, default flow to t = {record['t1']:g}")
    save_figure(fig, RESULTS / "work_precision.png")


def plot_trace(record) -> None:
    from gflow.plotting import plt, save_figure

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    t = record["t"]
    axes[0].semilogy(t, record["lambda_max"], "k-")
    axes[0].set_ylabel("λ_max(H)")
    axes[1].semilogy(t, record["h_lambda_tsit5"], "o-", label="Tsit5")
    axes[1].semilogy(t, record["h_lambda_stiff_switch"], "s-", label="StiffSwitch")
    axes[1].axhline(3.3, color="gray", ls="--", label="Tsit5 stability limit")
    axes[1].set_ylabel("mean step × λ_max")
    axes[1].legend(fontsize=8)
    for ax in axes:
        ax.set_xlabel("flow time t")
        ax.grid(True, alpha=0.3)
    save_figure(fig, RESULTS / "stiffness.png")
