"""Shared pieces of the benchmarks: the default flow, timing, records."""

from __future__ import annotations

import datetime
import os
import platform
import time
from pathlib import Path

import jax
import numpy as np

RESULTS = Path(__file__).parent / "results"
#: the seed of the default flow's initial weights (``jax.random.key``), the one every
#: timing of it uses
SEED = 0


def default_problem():
    """(loss_fn, model) of the default flow: MarkovChain.default(), m=32, ε=1e-3,
    initial weights from ``jax.random.key(SEED)``."""
    from gflow import AttentionModel, MarkovChain, PopulationLoss

    model = AttentionModel.init(
        d_vocab=4, d_model=32, init_scale=1e-3, key=jax.random.key(SEED)
    )
    return PopulationLoss(MarkovChain.default()), model


def timed(fn, *, repeats: int = 1):
    """(result, min wall seconds over ``repeats``) of ``fn()``, blocking on arrays."""
    best, out = np.inf, None
    for _ in range(repeats):
        start = time.perf_counter()
        out = jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - start)
    return out, best


def flat(model) -> np.ndarray:
    from gflow.analysis import flatten

    return np.asarray(flatten(model)[0])


def solve_to(loss, model, *, t1: float, solver, rtol: float):
    """``solve_flow`` as every benchmark calls it: atol = rtol/100, no progress bar."""
    from gflow import solve_flow

    return solve_flow(
        loss,
        model,
        t1=t1,
        solver=solver,
        rtol=rtol,
        atol=rtol * 1e-2,
        progress=False,
    )


def rel_error(model, x_ref) -> float:
    """Relative distance of ``model``'s flattened parameters to ``x_ref``."""
    return float(np.linalg.norm(flat(model) - x_ref) / np.linalg.norm(x_ref))


def load1() -> float | None:
    """The 1-minute load average now (None where the OS has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def machine() -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "load_average": load,
        "devices": [str(d) for d in jax.devices()],
        "jax": jax.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"
        ),
    }


def save(name: str, record: dict) -> Path:
    from gflow.runs import write_json

    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    write_json(path, {"machine": machine(), **record})
    return path
