"""One of each: the status words, the optimizer table, the reference base, the
package's public surface after a plain ``import gflow``."""

import subprocess
import sys
import typing

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gflow
from gflow import (
    OPTIMIZERS,
    STATUSES,
    AbstractOptimizer,
    AbstractReference,
    AdamODEReference,
    AdamW,
    FlowReference,
    MarkovChain,
    MarkovStream,
    ModifiedFlowReference,
    MomentumODEReference,
    SweepRun,
    Trajectory,
    run_optimizer,
)


def test_the_status_type_is_the_status_words():
    assert typing.get_args(gflow.Status) == gflow.STATUSES
    assert typing.get_type_hints(Trajectory)["status"] == gflow.Status
    assert "Status" in gflow.__all__


def test_status_words_are_shared_by_flows_optimizers_and_sweeps(unchecked):
    assert STATUSES == ("success", "max_steps", "diverged", "failed")
    with pytest.raises(ValueError, match="status must be one of"):
        Trajectory(
            t=np.zeros(1), metrics={"loss": np.zeros(1)}, final=None, status="ok"
        )
    run = SweepRun(
        lrs=np.array([0.1, 0.2]),
        t=np.zeros((2, 2)),
        steps=np.zeros((2, 2), int),
        loss=np.zeros((2, 2)),
        params=None,
        diverged_step=np.array([-1, 3]),
    )
    assert [run.status(m) for m in range(2)] == ["success", "diverged"]
    assert {run.status(m) for m in range(2)} <= set(STATUSES)


@pytest.mark.slow
def test_the_optimizer_table_builds_each_optimizer_once(setup):
    loss, model = setup
    assert list(OPTIMIZERS) == ["sgd", "momentum", "adam", "adamw", "rmsprop"]
    with pytest.raises(TypeError):
        AbstractOptimizer()
    for name, cls in OPTIMIZERS.items():
        method = gflow.optimizer_named(name, 0.5)
        assert isinstance(method, cls) and isinstance(method, AbstractOptimizer)
        assert method.name == name and method.stability >= 2.0
        # the step size lives in the state, so the clock reads it: t_k = k η
        traj = run_optimizer(loss, model, method.transform(0.05), steps=4)
        np.testing.assert_allclose(traj.t, 0.05 * np.arange(5), rtol=1e-12)
    # the table's optimizers are optax's: one SGD step is θ − η∇L
    grads = jax.grad(loss)(model)
    one = run_optimizer(loss, model, gflow.SGD().transform(0.1), steps=1)
    sgd = optax.sgd(0.1)
    updates, _ = sgd.update(grads, sgd.init(model), model)
    np.testing.assert_allclose(
        one.final.W_E, optax.apply_updates(model, updates).W_E, rtol=1e-12
    )


def test_references_share_one_abstract_base():
    with pytest.raises(TypeError):
        AbstractReference()
    refs = [
        FlowReference(),
        ModifiedFlowReference(),
        MomentumODEReference(),
        AdamODEReference(),
    ]
    assert all(isinstance(r, AbstractReference) for r in refs)
    assert [r.name for r in refs] == ["flow", "modified", "momentum_ode", "adam_ode"]
    assert FlowReference().hyperparams(0.1) == {"learning_rate": 0.1}
    momentum = MomentumODEReference(gamma=2.0).hyperparams(0.1)
    assert momentum["momentum"] == pytest.approx(0.8)
    assert momentum["learning_rate"] == pytest.approx(0.1 * 0.2)


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_a_plain_import_reaches_every_name_the_readme_uses():
    """Regression: ``gflow.solvers.StiffSwitch()`` raised AttributeError after a
    plain ``import gflow``."""
    code = (
        "import gflow\n"
        "print(type(gflow.solvers.StiffSwitch()).__name__, gflow.__version__)\n"
        "print(type(gflow.text.TextLoss).__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert lines[0].startswith("StiffSwitch ") and lines[0].split()[1][0].isdigit()
    assert lines[0].split()[1] == gflow.__version__
    assert gflow.solvers.StiffSwitch is gflow.dynamics.solvers.StiffSwitch


def test_stage_thresholds_are_fields_of_the_detector():
    """The edge fraction and the growth thresholds move the detected times as their
    closed forms say; bad thresholds are refused by name."""
    t = np.linspace(0, 100, 2001)
    x = 1.0 / (1.0 + np.exp((t - 50.0) / 2.0))  # a logistic fall of width 2 at t = 50
    for edge in (0.05, 0.2):
        ((t0, t1, _),) = gflow.StageDetector(edge=edge).moves(t, x, sign=-1)
        # a logistic covers the fraction e of its fall at 50 − 2 ln((1 − e)/e)
        w = 2.0 * np.log((1 - edge) / edge)
        assert t0 == pytest.approx(50 - w, abs=0.1)
        assert t1 == pytest.approx(50 + w, abs=0.1)
    # a fall of 0.5 counts at min_amplitude 0.1, not at 0.6
    half = 0.5 * x
    assert len(gflow.StageDetector().moves(t, half, sign=-1)) == 1
    assert gflow.StageDetector(min_amplitude=0.6).moves(t, half, sign=-1) == []
    # σ grows 100-fold: a stage at min_growth 4, none at min_growth 1000
    sv = np.exp(np.log(100.0) * np.clip((t - 20.0) / 40.0, 0.0, 1.0))
    assert gflow.StageDetector().growth(t, sv) is not None
    assert gflow.StageDetector(min_growth=1000.0).growth(t, sv) is None
    start = gflow.StageDetector(growth_start=np.log(10.0)).growth(t, sv)[0]
    assert start == pytest.approx(20.0 + 40.0 / 2, abs=0.1)  # ln σ up by ln 10
    for bad in (
        dict(edge=0.5),
        dict(min_move=0.0),
        dict(min_amplitude=-1.0),
        dict(growth_start=0.0),
        dict(min_growth=1.0),
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            gflow.StageDetector(**bad)


def test_adamw_decays_the_weights_by_the_closed_form(setup):
    """With a zero gradient AdamW's step is the decoupled decay θ ← (1 − ηλ)θ."""
    _, model = setup
    method = gflow.optimizer_named("adamw", 0.5, 0.2)
    assert method == AdamW(beta=0.5, weight_decay=0.2) and method.name == "adamw"

    def flat(m):
        return 0.0 * sum(jnp.sum(x) for x in jax.tree.leaves(m))

    traj = run_optimizer(flat, model, method.transform(0.1), steps=3)
    np.testing.assert_allclose(traj.final.W_E, (1 - 0.1 * 0.2) ** 3 * model.W_E)
    with pytest.raises(ValueError, match="weight_decay"):
        AdamW(weight_decay=-1.0)


@pytest.mark.slow
def test_markov_stream_draws_fresh_sequences_of_the_chain():
    chain = MarkovChain.from_lambda(pi=(0.6, 0.3, 0.1), lam=0.5)
    stream = MarkovStream(chain, batch=4000, length=3)
    a, b = stream(jax.random.key(0)), stream(jax.random.key(1))
    assert a.shape == (4000, 3) and not np.array_equal(a, b)
    # stationary start: token frequencies at every position are π
    freq = np.bincount(np.asarray(a).ravel(), minlength=3) / a.size
    np.testing.assert_allclose(freq, chain.pi, atol=0.02)
    with pytest.raises(ValueError, match="length >= 2"):
        MarkovStream(chain, batch=2, length=1)
