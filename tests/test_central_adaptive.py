"""RMSProp (gflow.dynamics.optimizers.RMSProp) and the central flows of preconditioned
optimizers (gflow.dynamics.references.central_adaptive) against hand loops, closed
forms, a tight Diffrax solve and RMSProp itself at the edge of stability."""

import dataclasses
import json

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gflow
from gflow.dynamics.references import (
    AdamCentralFlowReference,
    MomentumCentralFlowReference,
    RMSPropCentralFlowReference,
    central_flow_of,
)


def test_rmsprop_is_the_hand_written_recursion_started_at_the_first_gradient():
    rng = np.random.default_rng(0)
    A = jnp.asarray(rng.normal(size=(5, 5)))

    def loss(w):
        return jnp.sum(jnp.tanh(A @ w) ** 2)

    eta, beta, eps = 0.05, 0.8, 1e-6
    opt = gflow.RMSProp(beta=beta, eps=eps).transform(eta)
    w = jnp.asarray(rng.normal(size=5))
    state, hand, nu = opt.init(w), w, None
    for _ in range(6):
        g = jax.grad(loss)(w)
        update, state = opt.update(g, state, w)
        w = w + update
        gh = jax.grad(loss)(hand)
        nu = gh**2 if nu is None else beta * nu + (1 - beta) * gh**2
        hand = hand - eta * gh / jnp.sqrt(nu + eps)
        np.testing.assert_allclose(w, hand, rtol=1e-12)
    assert gflow.RMSProp().stability == 2.0
    assert gflow.optimizer_named("rmsprop", 0.7) == gflow.RMSProp(beta=0.7)
    with pytest.raises(ValueError, match="beta"):
        gflow.RMSProp(beta=1.0)


def _stable_rmsprop(loss, w0, times, beta, eps, lr):
    """RMSProp's flow without the oscillation, dθ/dt = −g/√(ν + ε),
    dν/dt = (1 − β)/(βη)(g² − ν), ν(0) = g(θ₀)², by Diffrax Dopri8 at rtol 1e-12."""
    r = (1 - beta) / (beta * lr)

    def field(t, y, args):
        w, nu = y
        g = jax.grad(loss)(w)
        return -g / jnp.sqrt(nu + eps), r * (g * g - nu)

    g0 = jax.grad(loss)(w0)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(field),
        diffrax.Dopri8(),
        t0=0.0,
        t1=float(times[-1]),
        dt0=None,
        y0=(w0, g0 * g0),
        saveat=diffrax.SaveAt(ts=jnp.asarray(times)),
        stepsize_controller=diffrax.PIDController(rtol=1e-12, atol=1e-14),
        max_steps=100_000,
    )
    return np.asarray(sol.ys[0])


@pytest.mark.slow
def test_below_the_edge_rmsprops_central_flow_is_its_stable_flow_at_fourth_order():
    # ε = 1 keeps d ≤ 1, so λ_max(S) ≤ 1.5 < 0.975 · 2/η at η = 1: X = 0
    rng = np.random.default_rng(1)
    Q, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    A = jnp.asarray((Q * np.linspace(0.1, 1.5, 6)) @ Q.T)

    def loss(w):
        return 0.5 * w @ A @ w + 0.1 * jnp.sum(w**4)

    w0 = jnp.asarray(rng.normal(size=6))
    times = np.arange(0, 11) * 1.0
    exact = _stable_rmsprop(loss, w0, times, 0.9, 1.0, 1.0)
    errors = []
    for substeps in (4, 8):
        ref = RMSPropCentralFlowReference(beta=0.9, eps=1.0, substeps=substeps)
        traj = ref.solve_one(loss, w0, times, 1.0)
        assert traj.status == "success"
        assert np.all(traj.metrics["lambda_max"] < 0.975 * 2.0)
        np.testing.assert_allclose(traj.metrics["predicted_loss"], traj.metrics["loss"])
        errors.append(np.abs(np.asarray(traj.params) - exact).max())
    assert errors[1] < 1e-5
    assert 10 < errors[0] / errors[1] < 22  # RK4: halving dt divides it by ~16


C = 0.05


def _eos_loss(w):
    """L(x, y) = y (1 − cos x) − c y: the sharpness along x is y cos x and the flow
    raises y (tests/test_central_flow.py). Under RMSProp with ε = 1 the oscillation
    in x also raises ν_x = y² E[x²], so the preconditioned sharpness η y/√(ν_x + 1)
    stays at 2 with E[x²] = 2c: y settles at 2/√(η² − 8c), not GD's 2/η."""
    return w[1] * (1.0 - jnp.cos(w[0])) - C * w[1]


@pytest.mark.slow
def test_rmsprop_past_the_edge_follows_its_central_flow():
    eta, steps, beta, eps = 1.0, 600, 0.9, 1.0
    w0 = jnp.asarray([0.3, 1.5])
    opt = gflow.RMSProp(beta=beta, eps=eps).transform(eta)
    update = jax.jit(opt.update)
    grad = jax.jit(jax.grad(_eos_loss))
    w, state, run = w0, opt.init(w0), [w0]
    for _ in range(steps):
        u, state = update(grad(w), state, w)
        w = w + u
        run.append(w)
    run = np.asarray(run)
    times = np.arange(steps + 1) * eta
    central = RMSPropCentralFlowReference(beta=beta, eps=eps).solve_one(
        _eos_loss, w0, times, eta
    )
    assert central.status == "success"
    cw = np.asarray(central.params)
    late = times >= 300
    # the preconditioned sharpness is held at 2/η and y reaches the closed form
    np.testing.assert_allclose(central.metrics["lambda_max"][late], 2 / eta, atol=1e-6)
    y_star = 2 / np.sqrt(eta**2 - 8 * C)
    assert abs(cw[-1, 1] - y_star) < 1e-4
    # RMSProp oscillates in x around 0 with its time-averaged y near the central
    # flow's, far from the flow without the oscillation (y climbs) and from GD's
    # central flow (y = 2/η)
    stable = RMSPropCentralFlowReference(beta=beta, eps=eps, oscillation=False)
    stable = dataclasses.replace(stable, substeps=8).solve_one(
        _eos_loss, w0, times, eta
    )
    y_avg = run[-100:, 1].mean()
    assert abs(run[-100:, 0].mean()) < 1e-3
    assert abs(y_avg - cw[-1, 1]) < 0.06
    assert np.asarray(stable.params)[-1, 1] > y_avg + 5
    assert abs(y_avg - 2 / eta) > 0.6
    # and its time-averaged loss is the one the central flow predicts
    loss_avg = np.asarray(jax.vmap(_eos_loss)(jnp.asarray(run[-100:]))).mean()
    predicted = central.metrics["predicted_loss"][-100:].mean()
    assert abs(loss_avg - predicted) < 0.02
    assert abs(central.metrics["loss"][-1] - predicted) > 0.1


def test_the_heavy_ball_attempt_below_its_edge_is_the_flow_sped_up():
    # no edge in reach: dθ/dt = −∇L/(1 − β), on a quadratic in closed form
    rng = np.random.default_rng(2)
    Q, _ = np.linalg.qr(rng.normal(size=(5, 5)))
    lam = np.linspace(0.01, 0.1, 5)
    A = jnp.asarray((Q * lam) @ Q.T)
    w0 = rng.normal(size=5)
    times = np.arange(0, 6) * 1.0
    traj = MomentumCentralFlowReference(beta=0.5, substeps=8).solve_one(
        lambda w: 0.5 * w @ A @ w, jnp.asarray(w0), times, 1.0
    )
    exact = np.stack([Q @ (np.exp(-lam * t / 0.5) * (Q.T @ w0)) for t in times])
    np.testing.assert_allclose(np.asarray(traj.params), exact, atol=1e-9)
    # λ_max of S = H/(1 − β), against its edge (2 + 2β)/((1 − β)η) = 6
    np.testing.assert_allclose(traj.metrics["lambda_max"], lam[-1] / 0.5, rtol=1e-8)
    assert MomentumCentralFlowReference(beta=0.5).edge_constant == 6.0


@pytest.mark.parametrize(
    "make, ref",
    [
        (
            lambda eta: optax.adam(eta, b1=0.9, b2=0.99),
            AdamCentralFlowReference(beta1=0.9, beta2=0.99, oscillation=False),
        ),
        (
            lambda eta: optax.sgd(eta, momentum=0.5),
            MomentumCentralFlowReference(beta=0.5, oscillation=False),
        ),
    ],
    ids=["adam", "heavy_ball"],
)
def test_below_the_edge_adam_and_heavy_ball_approach_their_models_at_first_order(
    make, ref
):
    # the quasi-static models (bias-corrected ν for Adam) are the η → 0 limits at
    # fixed β: the distance at t = 2 halves with η
    rng = np.random.default_rng(3)
    Q, _ = np.linalg.qr(rng.normal(size=(4, 4)))
    A = jnp.asarray((Q * np.linspace(0.2, 1.0, 4)) @ Q.T)

    def loss(w):
        return 0.5 * w @ A @ w + 0.05 * jnp.sum(w**4)

    w0 = jnp.asarray(rng.normal(size=4))
    grad = jax.jit(jax.grad(loss))
    distances = []
    for eta in (0.02, 0.01):
        opt = make(eta)
        update = jax.jit(opt.update)
        w, state = w0, opt.init(w0)
        for _ in range(int(round(2.0 / eta))):
            u, state = update(grad(w), state, w)
            w = w + u
        traj = ref.solve_one(loss, w0, np.array([0.0, 2.0]), eta)
        assert traj.metrics["lambda_max"][-1] * eta < 0.5 * ref.edge_constant
        distances.append(np.linalg.norm(np.asarray(traj.params)[-1] - np.asarray(w)))
    assert distances[0] < 0.1
    assert 1.7 < distances[0] / distances[1] < 2.3


def test_each_optimizer_has_its_own_central_flow():
    assert central_flow_of(gflow.SGD()) == gflow.CentralFlowReference()
    assert central_flow_of(gflow.RMSProp(beta=0.8, eps=1e-4)) == (
        RMSPropCentralFlowReference(beta=0.8, eps=1e-4)
    )
    assert central_flow_of(gflow.Momentum(beta=0.5)) == (
        gflow.MomentumCentralFlowReference(beta=0.5)
    )
    adam = central_flow_of(gflow.Adam(beta=0.9))
    assert adam == AdamCentralFlowReference(beta1=0.9)
    assert adam.edge_constant == pytest.approx(38.0)
    assert adam.hyperparams(0.1) == {"learning_rate": 0.1, "b1": 0.9, "b2": 0.999}
    rms = gflow.RMSPropCentralFlowReference()
    assert rms.hyperparams(0.2) == {"learning_rate": 0.2, "decay": 0.9, "eps": rms.eps}
    # the names are optax's: each reference's hyperparameters build its optimizer
    optax.rmsprop(**rms.hyperparams(0.2))
    optax.adam(**adam.hyperparams(0.1))
    with pytest.raises(ValueError, match="no central flow for 'adamw'"):
        central_flow_of(gflow.AdamW())
    with pytest.raises(ValueError, match="beta"):
        RMSPropCentralFlowReference(beta=0.0)
    with pytest.raises(ValueError, match="beta"):
        RMSPropCentralFlowReference(beta=1.0)  # no forgetting: not RMSProp
    with pytest.raises(ValueError, match="active"):
        AdamCentralFlowReference(active=1.5)


def test_sweep_config_takes_each_optimizers_central_flow():
    from gflow.runs import SweepConfig, reference_of

    cfg = SweepConfig(optimizer="rmsprop", reference="central", beta=0.8)
    assert reference_of(cfg) == RMSPropCentralFlowReference(beta=0.8)
    assert isinstance(reference_of(SweepConfig()), gflow.FlowReference)
    with pytest.raises(ValueError, match="no central flow for 'adamw'"):
        SweepConfig(optimizer="adamw", reference="central")
    with pytest.raises(ValueError, match="use sgd"):
        SweepConfig(optimizer="rmsprop", reference="modified")


@pytest.mark.slow
def test_a_run_that_starts_past_its_edge_is_refused_before_it_runs():
    # from the default init (scale 1e-3) RMSProp with ε = 1e-8 divides gradients of
    # ~1e-4 by their own size: η λ_max(S) is far above 2 at the first step
    from gflow.runs import SweepConfig, check_reference

    cfg = SweepConfig(optimizer="rmsprop", reference="central", lrs=(0.05,))
    with pytest.raises(ValueError, match="starts past its edge"):
        check_reference(cfg)
    check_reference(dataclasses.replace(cfg, eps=1e-2))  # d ≤ 10: below the edge
    check_reference(dataclasses.replace(cfg, reference="flow"))  # no such limit


def test_eps_enters_rmsprop_sweeps_only():
    from gflow.runs import SweepConfig

    base = SweepConfig(optimizer="rmsprop")
    assert dataclasses.replace(base, eps=1e-2).fingerprint() != base.fingerprint()
    assert SweepConfig(eps=1e-2).fingerprint() == SweepConfig().fingerprint()
    with pytest.raises(ValueError, match="eps"):
        SweepConfig(eps=-1.0)


@pytest.mark.slow
def test_compare_cli_with_rmsprops_central_flow(tmp_path, capsys):
    from gflow.cli import main

    argv = ["compare", "--optimizer", "rmsprop", "--lr", "0.2", "--t1", "20"]
    argv += ["--num-saves", "11", "--reference", "central"]
    assert main([*argv, "--out", str(tmp_path / "bad")]) == 2
    assert "starts past its edge" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
    out = tmp_path / "cmp"
    assert main([*argv, "--eps", "0.01", "--out", str(out)]) == 0
    report = json.loads((out / "compare.json").read_text())
    # RMSProp reaches its edge (η λ_max(S) = 2) by t ≈ 10 and then follows its
    # central flow, not the gradient flow
    assert max(report["central"]["lambda_max"]) * 0.2 == pytest.approx(2.0, abs=1e-3)
    assert report["central"]["final_error"] < 0.5 * report["final_error"]


@pytest.mark.slow
def test_sweep_cli_with_rmsprops_central_flow(tmp_path):
    from gflow.cli import main

    out = tmp_path / "sweep"
    argv = ["sweep", "--optimizer", "rmsprop", "--eps", "0.01", "--lrs", "0.2,0.1"]
    argv += ["--t1", "20", "--num-saves", "11", "--reference", "central"]
    assert main([*argv, "--out", str(out)]) == 0
    report = json.loads((out / "sweep.json").read_text())
    assert json.loads((out / "config.json").read_text())["config"]["eps"] == 0.01
    for rec in report["members"]:
        assert rec["status"] == "success"
        assert rec["final_error"] < rec["flow_final_error"]


@pytest.mark.slow
def test_the_beyond_gd_experiment_writes_its_table_and_figure(tmp_path):
    from experiments import central_flows_beyond_gd as module

    (case,) = [c for c in module.CASES if c[0] == "rmsprop-toy"]
    rec = module.run_case(case, saves=21)
    assert rec["central_status"] == rec["stable_status"] == "success"
    assert rec["central_distance"][-1] < 0.1 < 10 < rec["stable_distance"][-1]
    assert rec["edge"] == 2.0 and rec["edge_index"] is not None
    text = module.table([rec])
    assert text.count("\n") == 2 and "| rmsprop-toy | 1 | 2 |" in text
    assert module.figure([[rec]], tmp_path).exists()


def _beyond_gd_record(seed, central_end, edge_index=2, finite=True):
    """A hand-built run record of central_flows_beyond_gd (three saves)."""
    return {
        "case": "rmsprop-markov",
        "problem": "markov",
        "optimizer": "rmsprop",
        "seed": seed,
        "eta": 0.2,
        "edge": 10.0,
        "t": [0.0, 8.0, 100.0],
        "edge_index": edge_index,
        "finite": finite,
        "central_distance": [0.0, 1.0 + seed, central_end],
        "stable_distance": [0.0, 2.0, 2.5],
        "run_loss": [0.7, 0.6, 0.5 + seed / 100],
        "central_loss": [0.7, 0.6, 0.51],
        "stable_loss": [0.7, 0.6, 0.4],
        "seconds": 60.0 * (seed + 1),
    }


def test_the_beyond_gd_table_over_seeds_gives_median_range_and_counts():
    from experiments import central_flows_beyond_gd as module

    by_seed = {
        "0": {"cases": {"rmsprop-markov": _beyond_gd_record(0, 0.3)}},
        "1": {"cases": {"rmsprop-markov": _beyond_gd_record(1, 3.0, edge_index=None)}},
        "2": {"cases": {"rmsprop-markov": _beyond_gd_record(2, 0.4, finite=False)}},
    }
    text = module.seeds_table(by_seed)
    assert "seeds 0, 1, 2" in text
    row = next(line for line in text.splitlines() if line.startswith("| rmsprop"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # the edge is reached in 2 of 3 seeds (t = 100); before it the largest distance
    # (1 + seed), over the whole run where there is no edge (seed 1: 3.0 at the end)
    assert cells[3:6] == ["100 [100, 100] (2/3)", "2/3", "3 [1, 3]"]
    assert cells[7:10] == ["0.4 [0.3, 3]", "2.5 [2.5, 2.5]", "2/3"]
    assert cells[10] == "0.51 [0.5, 0.52]" and cells[12] == "0.4 [0.4, 0.4]"
    toys = {"rmsprop-toy": {"seconds": 2.0}, "adam-toy": {"seconds": 3.0}}
    markov = {"seeds": by_seed, "seconds": 360.0, "uptime_at_start": "load 0.5"}
    line = module.note(toys, markov, "0,1,2")
    assert "load after each seed" not in line  # seeds run before it was kept
    assert "have no seed" in line and "ran once (5 s)" in line
    assert "from seeds 0, 1, 2 in 6.0 min of runs (1.0, 2.0, 3.0 min per seed)" in line
    assert "`load 0.5`." in line and "--seeds 0,1,2 --write-docs" in line
    for i, v in enumerate(by_seed.values()):
        v["load_after"] = 1.0 + i
    line = module.note(toys, markov, "0,1,2")
    assert "`load 0.5`, 1-minute load after each seed: 1.00, 2.00, 3.00." in line
