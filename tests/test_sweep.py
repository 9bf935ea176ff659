import os
import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import numpy as np
import optax
import pytest

from gflow import (
    AttentionModel,
    MarkovChain,
    PopulationLoss,
    SequenceLoss,
    run_optimizer,
)
from gflow.analysis import fit_order, max_eigenvalue
from gflow.dynamics import run_sweep, save_steps

TRACES = []


class CountingLoss(eqx.Module):
    """The population loss; records each time it is traced (a Python side effect)."""

    inner: PopulationLoss

    def __call__(self, model):
        TRACES.append(1)
        return self.inner(model)


@pytest.fixture(scope="module")
def setup():
    chain = MarkovChain.from_lambda(pi=(0.6, 0.3, 0.1), lam=0.5)
    model = AttentionModel.init(
        d_vocab=3, d_model=3, init_scale=0.3, key=jax.random.key(1)
    )
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
    return CountingLoss(PopulationLoss(chain)), model, opt


def test_save_steps_hit_the_grid():
    steps = save_steps([0.5, 0.25, 0.3], t1=1.0, num_saves=3)
    np.testing.assert_array_equal(steps, [[0, 1, 2], [0, 2, 4], [0, 2, 3]])
    # a step size beyond t1 still takes one step
    assert save_steps([10.0], t1=1.0, num_saves=2)[0, -1] == 1


@pytest.mark.slow
def test_members_match_single_runs(setup):
    loss, model, opt = setup
    run = run_sweep(loss, model, opt, [0.1, 0.05], t1=1.0, num_saves=3)
    np.testing.assert_allclose(run.t, [[0, 0.5, 1.0], [0, 0.5, 1.0]], atol=1e-12)
    for m, lr in enumerate([0.1, 0.05]):
        steps = int(run.steps[m, -1])
        single = run_optimizer(
            loss,
            model,
            optax.sgd(lr),
            learning_rate=lr,
            steps=steps,
            save_every=steps // 2,
            save_params=True,
        )
        np.testing.assert_allclose(run.loss[m], single.metrics["loss"], rtol=1e-12)
        np.testing.assert_allclose(
            run.member(m).final.W_E, single.final.W_E, rtol=1e-10
        )
        assert run.status(m) == "success"


@pytest.mark.parametrize(
    "all_positions", [False, pytest.param(True, marks=pytest.mark.slow)]
)
def test_sequence_loss_members_match_single_runs(all_positions):
    """The vmapped sweep on a sampled sequence loss (the d×d form, batched over the
    members) takes the same steps as plain gradient descent at each step size, a
    loop written here over one compiled gradient (two optimizer runs, one program
    per step count, cost the default run twice the time)."""
    chain = MarkovChain.default()
    model = AttentionModel.init(
        d_vocab=4, d_model=8, init_scale=0.5, key=jax.random.key(3)
    )
    tokens = chain.sample(key=jax.random.key(4), batch=16, length=9)
    loss = SequenceLoss(tokens, all_positions=all_positions)
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
    lrs = [0.5, 0.25]  # 4 and 8 steps: the middle save is a step
    run = run_sweep(loss, model, opt, lrs, t1=2.0, num_saves=3)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    value_and_grad = jax.jit(jax.value_and_grad(lambda p: loss(eqx.combine(p, static))))
    for m, lr in enumerate(lrs):
        steps = int(run.steps[m, -1])
        p, losses = params, []
        for k in range(steps + 1):  # saves at steps 0, steps / 2 and steps
            value, grad = value_and_grad(p)
            if k % (steps // 2) == 0:
                losses.append(float(value))
            if k < steps:
                p = jax.tree.map(lambda x, g, lr=lr: x - lr * g, p, grad)
        np.testing.assert_allclose(run.loss[m], losses, rtol=1e-12)
        assert run.loss[m, -1] < run.loss[m, 0] - 1e-3  # the members moved
        final = eqx.filter(run.member(m).final, eqx.is_inexact_array)
        for a, b in zip(jax.tree.leaves(final), jax.tree.leaves(p)):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)


@pytest.mark.slow
def test_new_step_sizes_do_not_recompile(setup):
    loss, model, opt = setup
    a = run_sweep(loss, model, opt, [0.1, 0.05, 0.02], t1=0.5, num_saves=4)
    traced = len(TRACES)
    b = run_sweep(loss, model, opt, [0.3, 0.07, 0.011], t1=0.5, num_saves=4)
    assert len(TRACES) == traced  # the loss was not traced again: no recompilation
    assert not np.allclose(a.loss[:, -1], b.loss[:, -1])  # the new η were used


@pytest.mark.slow
def test_first_loss_rise_matches_the_per_step_losses(setup):
    # oracle: the per-step losses of single runs; 0.5/λ₀ descends monotonically (the
    # descent lemma), 3/λ₀ and 12/λ₀ overshoot the top Hessian direction at once
    loss, model, opt = setup
    lam0 = float(max_eigenvalue(loss, model, key=jax.random.key(0), iters=20)[0])
    lrs = [0.5 / lam0, 3.0 / lam0, 12.0 / lam0]
    run = run_sweep(loss, model, opt, lrs, t1=30.0, num_saves=4)
    for m, lr in enumerate(lrs):
        steps = int(run.steps[m, -1])
        single = run_optimizer(
            loss, model, optax.sgd(lr), learning_rate=lr, steps=steps, save_every=1
        )
        losses = single.metrics["loss"]
        rose = losses[1:] > losses[:-1] * (1 + 100 * np.finfo(float).eps)
        first = int(np.argmax(rose)) + 1 if rose.any() else -1
        assert run.first_rise_step[m] == first
        assert run.rises[m] == rose.sum()
        assert run.first_rise_time(m) == (None if first < 0 else first * lr)
    assert run.first_rise_step[0] == -1 and run.first_rise_step[1] > 0


def test_diverged_member_does_not_spoil_the_others(setup):
    loss, model, opt = setup
    alone = run_sweep(loss, model, opt, [0.1, 0.05, 0.2], t1=2.0, num_saves=5)
    mixed = run_sweep(loss, model, opt, [0.1, 1e6, 0.2], t1=2.0, num_saves=5)
    assert [mixed.status(m) for m in range(3)] == ["success", "diverged", "success"]
    assert mixed.diverged_step[1] >= 0 and mixed.diverged_step[0] == -1
    assert np.isnan(mixed.loss[1, -1])
    np.testing.assert_allclose(mixed.loss[[0, 2]], alone.loss[[0, 2]], rtol=1e-12)
    member = mixed.member(1)
    assert member.status == "diverged"
    assert np.all(np.isfinite(member.metrics["loss"]))


def test_sweep_needs_injected_learning_rate(setup):
    loss, model, _ = setup
    with pytest.raises(ValueError, match="inject_hyperparams"):
        run_sweep(loss, model, optax.sgd(0.1), [0.1], t1=1.0)
    with pytest.raises(ValueError, match="lrs"):
        run_sweep(loss, model, setup[2], [0.1, -1.0], t1=1.0)


def test_fit_order_recovers_a_power_law():
    lrs = np.array([0.4, 0.2, 0.1, 0.05])
    p, c = fit_order(lrs, 3.0 * lrs**1.5)
    assert p == pytest.approx(1.5, abs=1e-12)
    assert np.exp(c) == pytest.approx(3.0, rel=1e-10)
    p, _ = fit_order(np.append(lrs, 1.0), np.append(lrs**2, np.nan))  # NaN ignored
    assert p == pytest.approx(2.0, abs=1e-12)


SHARDED = textwrap.dedent(
    """
    import jax
    jax.config.update("jax_enable_x64", True)
    import numpy as np, optax
    from gflow import AttentionModel, MarkovChain, PopulationLoss
    from gflow.dynamics import member_mesh, run_sweep
    assert jax.device_count() == 4, jax.devices()
    chain = MarkovChain.from_lambda(pi=(0.6, 0.3, 0.1), lam=0.5)
    model = AttentionModel.init(d_vocab=3, d_model=3, init_scale=0.3,
                                key=jax.random.key(1))
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
    lrs = [0.2, 0.1, 0.05, 0.04, 0.02, 1e6]  # 6 members padded to 8 over 4 devices
    mesh = member_mesh()
    a = run_sweep(PopulationLoss(chain), model, opt, lrs, t1=1.0, num_saves=3,
                  mesh=mesh)
    b = run_sweep(PopulationLoss(chain), model, opt, lrs, t1=1.0, num_saves=3)
    assert a.info["sharded_over"] == 4
    np.testing.assert_allclose(a.loss, b.loss, rtol=1e-12)
    np.testing.assert_array_equal(a.diverged_step, b.diverged_step)
    assert a.loss.shape == (6, 3)
    print("SHARDED_OK")
    """
)


@pytest.mark.slow  # in CI's slow run (.ci/run): keeps the default suite under 3 min
def test_sweep_shards_over_four_cpu_devices():
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.getcwd() + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-c", SHARDED],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "SHARDED_OK" in out.stdout, out.stderr[-3000:]


def test_departure_records_figure(tmp_path):
    from gflow.plotting import plot_departure_records

    member = {
        "lr": 2.0,
        "bound": 1.0,
        "predicted": 72.0,
        "first_rise": 134.0,
        "own_prediction": None,
        "t": [0.0, 100.0, 200.0],
        "lambda_max": [0.5, 1.2, 0.9],
    }
    results = {
        "flow": {"t": [0.0, 100.0, 200.0], "lambda_max": [0.5, 1.2, 1.6]},
        "sgd": {"t1": 200.0, "stability": 2.0, "speed": 1, "members": [member]},
    }
    plot_departure_records(results, tmp_path / "d.png")
    assert (tmp_path / "d.png").stat().st_size > 0
