"""Is small-step GD a proxy for the flow? η checked against 2/λ_max (issue 16, point 4).

GD of step η follows the gradient flow only while η·λ_max of the loss Hessian stays
well below its stability bound 2 (``gflow.analysis.sharpness``). ``stability_check``
measures λ_max at a handful of a GD run's saved snapshots by Lanczos on
Hessian-vector products (``gflow.analysis.hessian.max_eigenvalue``: one compiled
program for all of them, each warm-started from the previous top eigenvector) and
reports the stability ratio η·λ_max/2 at each. Above ``FLOW_PROXY_LIMIT`` (η·λ_max >
1, half the bound) the run is not a flow proxy there: ``stability_warning`` says so
in one line.
"""

from __future__ import annotations

import jax
import numpy as np

from gflow.analysis.hessian import flatten, max_eigenvalue
from gflow.array_types import LossFn
from gflow.dynamics.trajectory import Trajectory

#: η·λ_max above which GD is not taken for the flow (its stability bound is 2).
FLOW_PROXY_LIMIT = 1.0


def checked_saves(num_saves: int, checks: int) -> np.ndarray:
    """``checks`` save indices spread evenly over 0 .. num_saves − 1, the first and
    the last included (fewer where the run has fewer saves)."""
    if checks < 1 or num_saves < 1:
        return np.zeros(0, int)
    return np.unique(np.round(np.linspace(0, num_saves - 1, checks)).astype(int))


def stability_check(
    loss_fn: LossFn,
    traj: Trajectory,
    learning_rate: float,
    *,
    checks: int = 6,
    iters: int = 20,
    seed: int = 0,
) -> dict:
    """λ_max of the Hessian of ``loss_fn`` at ``checks`` of ``traj``'s snapshots and
    the stability ratio η·λ_max/2 of step ``learning_rate`` there.

    Saves where the recorded loss is not finite (after a divergence) are skipped
    (λ_max None). Returns a JSON-ready dict: ``saves`` (indices), ``t``,
    ``lambda_max``, ``stability_ratio`` (η·λ_max/2 per checked save),
    ``max_stability_ratio`` and ``flow_proxy`` (η·λ_max ≤ ``FLOW_PROXY_LIMIT`` at
    every checked save), ``learning_rate`` and ``iters``.
    """
    if traj.params is None:
        raise ValueError("stability_check needs the run's parameter snapshots")
    idx = checked_saves(len(traj), checks)
    loss = np.asarray(traj.metrics["loss"])
    lams, v = [], None
    for i in idx:
        if not np.isfinite(loss[i]):
            lams.append(None)
            continue
        model = traj.snapshot(int(i))
        if v is None:
            x = flatten(model)[0]
            v = jax.random.normal(jax.random.key(seed), x.shape, x.dtype)
        lam, v = max_eigenvalue(loss_fn, model, key=None, iters=iters, v0=v)
        lams.append(float(lam))
    ratios = [None if lam is None else learning_rate * lam / 2 for lam in lams]
    known = [r for r in ratios if r is not None]
    worst = max(known) if known else None
    return {
        "learning_rate": float(learning_rate),
        "iters": int(iters),
        "saves": [int(i) for i in idx],
        "t": [float(traj.t[i]) for i in idx],
        "lambda_max": lams,
        "stability_ratio": ratios,
        "max_stability_ratio": worst,
        "flow_proxy": worst is not None and 2 * worst <= FLOW_PROXY_LIMIT,
    }


def stability_line(check: dict) -> str:
    """One line for a run's summary: the largest η·λ_max/2 over the checked saves."""
    worst = check["max_stability_ratio"]
    if worst is None:
        return "η·λ_max/2: no finite save checked"
    k = check["lambda_max"].index(max(x for x in check["lambda_max"] if x is not None))
    return (
        f"η·λ_max/2 ≤ {worst:.3g} over {len(check['saves'])} checked saves "
        f"(λ_max {check['lambda_max'][k]:.4g} at t={check['t'][k]:g})"
    )


def stability_warning(name: str, check: dict) -> str | None:
    """A one-line warning where η·λ_max > ``FLOW_PROXY_LIMIT`` at some checked save
    (None otherwise)."""
    over = [
        (t, r)
        for t, r in zip(check["t"], check["stability_ratio"])
        if r is not None and 2 * r > FLOW_PROXY_LIMIT
    ]
    if not over:
        return None
    t, r = over[0]
    eta = check["learning_rate"]
    lam = max(x for x in check["lambda_max"] if x is not None)
    return (
        f"warning: {name}: η·λ_max = {2 * r:.3g} > {FLOW_PROXY_LIMIT:g} from t={t:g} "
        f"(η = {eta:g}): GD is not a flow proxy there; keep --lr below "
        f"{FLOW_PROXY_LIMIT / lam:.3g}"
    )
