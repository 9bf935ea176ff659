"""Where the default's cost at t = 400 goes: a per-step trace of AutoSwitch against
Diffrax Tsit5 on the default Markov flow (issue 31, point 2).

To t = 400 the default costs more than Tsit5 although the flow is not yet stiff:
Tsit5's steps touch their stability limit for a while, the default enters its stiff
phase there, finds its stiff methods dearer than Tsit5 and hands back. This script
traces every step attempt of both solves (``jax.debug.callback`` in a subclass of
each solver; accepted or rejected alike, since Diffrax's counts charge a rejected
step at the average cost of an accepted one) and reports:

- the default's stiff window [first stiff attempt, first Tsit5 attempt after it];
- the evaluations the default spends in it, by method, every attempt counted;
- the steps and evaluations that Tsit5 alone spends over the same window.

Counts only (no timing): deterministic for a machine, so any load will do.

Command:  PYTHONPATH=$PWD python -m benchmarks.stiff_detour [--t1 400]
Runtime:  about 20 s on one core.
Writes:   benchmarks/results/stiff_detour.json.
"""

from __future__ import annotations

import argparse

import jax

if __name__ == "__main__":
    jax.config.update("jax_enable_x64", True)

import diffrax  # noqa: E402
import numpy as np  # noqa: E402

from gflow.dynamics.solvers import AutoSwitch  # noqa: E402

from .common import default_problem, save, solve_to  # noqa: E402


class _TracedAuto(AutoSwitch):
    """AutoSwitch that reports (t0, method, evaluations) of every step attempt."""

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        out = super().step(terms, t0, t1, y0, args, solver_state, made_jump)
        spent = out[3].num_evals - solver_state.num_evals
        jax.debug.callback(_record, t0, solver_state.method, spent, ordered=True)
        return out


class _TracedTsit5(diffrax.Tsit5):
    """Tsit5 that reports the start of every step attempt (6 evaluations each:
    first same as last)."""

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        jax.debug.callback(_record, t0, 0, 6, ordered=True)
        return super().step(terms, t0, t1, y0, args, solver_state, made_jump)


_ROWS: list[tuple[float, int, int]] = []


def _record(t0, method, evals):
    _ROWS.append((float(t0), int(method), int(evals)))


def _trace(loss, model, solver, t1: float) -> np.ndarray:
    _ROWS.clear()
    solve_to(loss, model, t1=t1, solver=solver, rtol=1e-6)
    jax.effects_barrier()
    return np.array(_ROWS, dtype=float).reshape(-1, 3)


def run(*, t1: float = 400.0) -> dict:
    loss, model = default_problem()
    auto = _trace(loss, model, _TracedAuto(), t1)
    tsit5 = _trace(loss, model, _TracedTsit5(), t1)
    names = AutoSwitch().method_names
    stiff = auto[:, 1] != 0
    record = {
        "t1": t1,
        "rtol": 1e-6,
        "attempts": len(auto),
        "tsit5_attempts": len(tsit5),
    }
    if not stiff.any():
        record["window"] = None
    else:
        start = auto[stiff, 0].min()
        after = (auto[:, 0] > auto[stiff, 0].max()) & ~stiff
        end = auto[after, 0].min() if after.any() else t1
        inside = (auto[:, 0] >= start) & (auto[:, 0] < end)
        t_inside = (tsit5[:, 0] >= start) & (tsit5[:, 0] < end)
        record["window"] = {
            "t_start": float(start),
            "t_end": float(end),
            "default_evals": int(auto[inside, 2].sum()),
            "default_by_method": {
                names[m]: {
                    "attempts": int((inside & (auto[:, 1] == m)).sum()),
                    "evals": int(auto[inside & (auto[:, 1] == m), 2].sum()),
                }
                for m in range(len(names))
            },
            "tsit5_attempts": int(t_inside.sum()),
            "tsit5_evals": int(tsit5[t_inside, 2].sum()),
        }
    record["default_evals_all_attempts"] = int(auto[:, 2].sum())
    record["tsit5_evals_all_attempts"] = int(tsit5[:, 2].sum())
    save("stiff_detour", record)
    print(record)
    return record


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--t1", type=float, default=400.0)
    run(t1=p.parse_args().t1)


if __name__ == "__main__":
    main()
