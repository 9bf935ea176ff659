"""Heavy ball and Adam converge to their ODEs (β = 1 − γη) at first order."""

import numpy as np
import optax
import pytest

from gflow.analysis import compare_sweep
from gflow.dynamics import run_sweep
from gflow.dynamics.references import AdamODEReference, MomentumODEReference

LRS = (0.04, 0.02, 0.01)


def errors_and_order(setup, optimizer, reference, t1):
    loss, model = setup
    run = run_sweep(
        loss,
        model,
        optimizer,
        LRS,
        t1=t1,
        num_saves=11,
        hyperparams=reference.hyperparams,
    )
    res = compare_sweep(run, reference, loss, model)
    return np.array([m["error"] for m in res["members"]]), res["order"]


@pytest.mark.slow
def test_heavy_ball_converges_to_its_ode_at_first_order(setup):
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1, momentum=0.9)
    errors, order = errors_and_order(setup, opt, MomentumODEReference(gamma=2.0), 4.0)
    assert np.all(np.diff(errors) < 0)  # halving η shrinks the error
    assert 0.85 <= order <= 1.15


@pytest.mark.slow
def test_adam_converges_to_its_ode_at_first_order(setup):
    opt = optax.inject_hyperparams(optax.adam)(learning_rate=0.1, b1=0.9, b2=0.999)
    ref = AdamODEReference(gamma1=2.0, gamma2=0.5)
    errors, order = errors_and_order(setup, opt, ref, 2.0)
    assert np.all(np.diff(errors) < 0)
    assert 0.85 <= order <= 1.15


def test_beta_scaling_is_checked():
    assert MomentumODEReference(gamma=2.0).hyperparams(0.1) == pytest.approx(
        {"learning_rate": 0.1 * 0.2, "momentum": 0.8}
    )
    with pytest.raises(ValueError, match="γη < 1"):
        MomentumODEReference(gamma=20.0).hyperparams(0.1)
    hp = AdamODEReference(gamma1=2.0, gamma2=0.5).hyperparams(0.1)
    assert hp["b1"] == pytest.approx(0.8) and hp["b2"] == pytest.approx(0.95)
