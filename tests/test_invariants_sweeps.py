"""A sweep against its reference, on constructed members (issue 58, point 1: sweeps).

``compare_sweep`` reads a ``SweepRun`` and a reference; both are built here by
hand, so every number it reports has a closed form. The reference is
θ(t) = θ0 e^{−t} (24 parameters); member m with step η saves at steps
k = 0, 2, 4, 8, 16 (t = k η) and sits at

    θ(t) + C η^p u      at 0 < t < 16 η       (u a unit vector, C = 0.5, p = 2)
    θ(t) + C η^{2p} u   at its last save,

so its error (the largest distance) is C η^p and its final error C η^{2p}. Six
members: η = 0.8 past its edge of stability (the loss's λ_max = 3 > 2/η) at a
constant distance 0.05 below the threshold 0.1, η = 0.4 at a constant distance
1 above the threshold from its first save on, η = 0.2, 0.1, 0.05 in the
asymptotic regime, and η = 0.025 diverged at step 6.

The closed form: the order is p exactly, fitted over members 2-4 only (with the
0.8 member the slope would be 1.31, with the 0.4 member 3.09; the final errors
give 2p); the extrapolation takes the two smallest η of the fit, (0.1, 0.05), and is
exact at their common times except the later one's last save, where its error is
C η_b^{2p}(1 + w) − w C η_a^p with w = 1/(2^p − 1).
"""

from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gflow
from gflow import AbstractReference
from gflow.analysis import compare, compare_sweep
from gflow.dynamics import SweepRun, Trajectory

N = 24
A = np.linspace(0.5, 3.0, N)  # the loss's Hessian: λ_max = 3
THETA0 = np.linspace(1.0, 2.0, N)
U = np.ones(N) / np.sqrt(N)
STEPS = np.array([0, 2, 4, 8, 16])
LRS = np.array([0.8, 0.4, 0.2, 0.1, 0.05, 0.025])
C, P, THRESHOLD, STABILITY = 0.5, 2.0, 0.1, 2.0
DIVERGED = {5: 6}  # member -> step


def _loss(params):
    return 0.5 * jnp.sum(jnp.asarray(A) * params["w"] ** 2)


def _truth(t):
    return THETA0[None, :] * np.exp(-np.asarray(t))[:, None]  # [S, N]


def _offset(m):
    """Member m's distance to the reference at each save [S]."""
    eta = LRS[m]
    if m < 2:  # 0: below the threshold, 1: above it from its first save on
        return np.where(STEPS > 0, (0.05, 1.0)[m], 0.0)
    d = np.where(STEPS > 0, C * eta**P, 0.0)
    d[-1] = C * eta ** (2 * P)
    return d


class _Truth(AbstractReference):
    name: ClassVar[str] = "constructed"

    def solve(self, loss_fn, model, times, lrs, observables=None):
        out = []
        for t in times:
            w = _truth(t)
            loss = np.array([float(_loss({"w": x})) for x in w])
            out.append(
                Trajectory(
                    t=np.asarray(t),
                    metrics={"loss": loss},
                    final={"w": w[-1]},
                    params={"w": jnp.asarray(w)},
                )
            )
        return out

    def hyperparams(self, lr):
        return {"learning_rate": lr}


def _sweep():
    t = LRS[:, None] * STEPS[None, :]
    w = np.stack([_truth(t[m]) + _offset(m)[:, None] * U for m in range(len(LRS))])
    loss = np.array([[float(_loss({"w": x})) for x in wm] for wm in w])
    diverged = np.full(len(LRS), -1)
    for m, k in DIVERGED.items():
        diverged[m] = k
        loss[m, STEPS > k] = np.nan
    return SweepRun(
        lrs=LRS,
        t=t,
        steps=np.broadcast_to(STEPS, t.shape).copy(),
        loss=loss,
        params={"w": jnp.asarray(w)},
        diverged_step=diverged,
    )


@pytest.fixture(scope="module")
def result():
    return compare_sweep(
        _sweep(),
        _Truth(),
        _loss,
        {"w": jnp.asarray(THETA0)},
        threshold=THRESHOLD,
        stability=STABILITY,
        key=jax.random.key(0),
    )


def test_the_fit_reads_the_asymptotic_members_errors(result):
    """Order p and intercept log C over members 2-4, each left-out member with
    its own reason, the errors and the diverged member's time k η.

    Catches a member that departs at its first save kept in the fit (<= read as
    <: slope 3.09), one past its edge kept (1.31), the order fitted on the final
    errors (2p), x and y swapped in the fit (1/p), the divergence time counted
    one step late (0.175 for 0.15), and λ_max read along the largest step's
    reference (its times in ``sharpness``)."""
    assert result.order_members == [2, 3, 4]
    assert result.order == pytest.approx(P, abs=1e-9)
    assert result.intercept == pytest.approx(np.log(C), abs=1e-9)
    reasons = {e["member"]: e["reason"] for e in result.excluded}
    assert sorted(reasons) == [0, 1, 5]
    assert reasons[0].startswith("past its edge of stability")
    assert reasons[1].startswith("distance to the reference above the threshold")
    assert reasons[5].startswith("diverged at t = 0.15")
    members = result.members
    for m in (2, 3, 4):
        assert members[m]["error"] == pytest.approx(C * LRS[m] ** P, rel=1e-9)
        assert members[m]["final_error"] == pytest.approx(C * LRS[m] ** 4, rel=1e-9)
    assert members[1]["departure_time"] == pytest.approx(2 * LRS[1])
    assert members[5]["diverged_time"] == pytest.approx(6 * LRS[5])
    # λ_max along the reference of the smallest step that was compared (0.05)
    np.testing.assert_allclose(result.sharpness["t"], LRS[4] * STEPS)
    np.testing.assert_allclose(result.sharpness["lambda_max"], 3.0, rtol=1e-6)


def test_richardson_takes_the_two_smallest_steps_of_the_fit(result):
    """The extrapolation of (η_a, η_b) = (0.1, 0.05) at their four common times
    has the closed-form error C η_b^{2p}(1 + w) − w C η_a^p, w = 1/(2^p − 1).

    Catches the two members swapped (the weight then 1/(2^-p − 1)), the step
    ratio inverted, the correction's sign flipped, and a pair other than the two
    smallest of the fit (the diverged member, or the two largest)."""
    out = result.richardson
    assert out["lrs"] == [LRS[3], LRS[4]] and out["times"] == 4
    w = 1.0 / (2.0**P - 1.0)
    exact = abs(C * LRS[4] ** (2 * P) * (1 + w) - w * C * LRS[3] ** P)
    assert out["error"] == pytest.approx(exact, rel=1e-9)


def test_attention_drift_is_the_total_variation_of_the_population_attention():
    """``compare(..., pi=pi)``'s attention drift at each save and query is
    ½ Σ_k |A_a(q, k) − A_b(q, k)| of the two runs' population attention: zero
    against itself, at most 1, and the hand formula between two models.

    Catches the ½ of the total variation dropped (the drift then reaches 2)."""
    pi = np.array([0.5, 0.3, 0.2])
    models = [
        gflow.AttentionModel.init(
            d_vocab=3, d_model=3, init_scale=2.0, key=jax.random.key(s)
        )
        for s in (0, 1)
    ]

    def scaled(model, c):
        return jax.tree.map(lambda x: c * x, model)

    def run(model):
        snaps = jax.tree.map(lambda x, y: jnp.stack([x, y]), model, scaled(model, 2))
        t, loss = np.array([0.0, 1.0]), np.zeros(2)
        return Trajectory(t=t, metrics={"loss": loss}, final=model, params=snaps)

    a, b = run(models[0]), run(models[1])
    assert np.all(compare(a, a, pi=pi)["attention_tv"] == 0.0)
    drift = compare(a, b, pi=pi)["attention_tv"]  # [2 saves, 3 queries]
    for i, c in enumerate((1.0, 2.0)):
        pa, pb = (
            np.asarray(gflow.population_attention(scaled(m, c), pi)) for m in models
        )
        np.testing.assert_allclose(drift[i], 0.5 * np.abs(pa - pb).sum(-1), rtol=1e-12)
    assert np.all(drift <= 1.0) and drift.max() > 0.3
