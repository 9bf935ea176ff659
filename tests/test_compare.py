import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gflow import AttentionModel, MarkovChain, PopulationLoss, Trajectory
from gflow.analysis import (
    compare,
    dense_hessian,
    departure_time,
    predicted_departure,
    richardson,
    sharpness_along,
    stage_shifts,
    stage_times,
)
from gflow.dynamics import SGD, Adam, Momentum, gradient_norm, optimizer_named
from gflow.dynamics.references import ModifiedLoss


@pytest.fixture(scope="module")
def setup():
    chain = MarkovChain.from_lambda(pi=(0.6, 0.3, 0.1), lam=0.5)
    model = AttentionModel.init(
        d_vocab=3, d_model=3, init_scale=0.5, key=jax.random.key(1)
    )
    return chain, PopulationLoss(chain), model


def _stack(models):
    # numpy leaves, as a solve saves them (stacked without a compile per length)
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *models)


#: a loss's value, compiled once per model shape rather than run op by op
_value = eqx.filter_jit(lambda loss, model: loss(model))


def _traj(t, models, loss):
    return Trajectory(
        t=np.asarray(t, float),
        metrics={"loss": np.array([float(_value(loss, m)) for m in models])},
        final=models[-1],
        params=_stack(models),
    )


def test_departure_time():
    t = np.arange(5.0)
    assert departure_time(t, [0, 0.05, 0.2, 0.3, 1.0], 0.1) == 2.0
    assert departure_time(t, [0, 0.05, 0.02, 0.03, 0.01], 0.1) is None
    assert departure_time(t, [0, 0.05, np.nan, 0.0, 0.0], 0.1) == 2.0
    # a distance equal to the threshold does not exceed it
    assert departure_time(t, [0, 0.1, 0.1, 0.3, 0.0], 0.1) == 3.0


def test_modified_loss_value(setup):
    _, loss, model = setup
    eta = 0.3
    # the reference and the modified loss, each compiled (not run op by op)
    value, norm = eqx.filter_jit(lambda m: (loss(m), gradient_norm(loss, m)))(model)
    expected = float(value) + eta / 4 * float(norm) ** 2
    modified = eqx.filter_jit(ModifiedLoss(loss, jnp.asarray(eta)))(model)
    assert float(modified) == pytest.approx(expected, rel=1e-12)


def test_compare_known_shift(setup):
    chain, loss, model = setup
    # run = reference with W_P shifted by a known matrix from index 2 on
    # a constant shift of W_P moves every logit equally (softmax-invariant, the loss
    # would not move): shift one output column only
    shift = jnp.zeros_like(model.W_P).at[:, 0].set(0.1)
    ref_models = [model] * 4
    run_models = [model, model] + [
        dataclasses.replace(model, W_P=model.W_P + shift) for _ in range(2)
    ]
    ref = _traj([0, 1, 2, 3], ref_models, loss)
    run = _traj([0, 1, 2, 3], run_models, loss)

    def detector(traj):  # a simple rule: first time the loss moves by 1e-6
        moved = np.abs(traj.metrics["loss"] - traj.metrics["loss"][0]) > 1e-6
        return {"moved": float(traj.t[np.argmax(moved)]) if moved.any() else None}

    out = compare(run, ref, threshold=0.1, pi=chain.pi, stage_detector=detector)
    norm = float(jnp.linalg.norm(shift))
    np.testing.assert_allclose(out["distance"]["total"], [0, 0, norm, norm])
    np.testing.assert_allclose(out["distance"]["W_P"], [0, 0, norm, norm])
    np.testing.assert_allclose(out["distance"]["W_E"], 0.0)
    assert out["departure_time"] == 2.0
    assert out["error"] == pytest.approx(norm)
    assert out["loss_gap"][0] == 0.0 and out["loss_gap"][2] != 0.0
    # W_P does not enter the attention: no drift
    np.testing.assert_allclose(out["attention_tv"], 0.0, atol=1e-15)
    assert out["stages"]["moved"] == {"run": 2.0, "reference": None, "shift": None}


def test_compare_a_longer_run_with_growing_distance(setup):
    """The run has one save more than the reference; its W_E moves by k·0.06 at save
    k, so the distance crosses the default threshold 0.1 at k = 2 and the attention
    of every query drifts."""
    chain, loss, model = setup
    direction = jnp.zeros_like(model.W_E).at[0, 0].set(1.0)
    run_models = [
        dataclasses.replace(model, W_E=model.W_E + 0.06 * k * direction)
        for k in range(5)
    ]
    run = _traj([0, 1, 2, 3, 4], run_models, loss)
    ref = _traj([0, 1, 2, 3], [model] * 4, loss)
    out = compare(run, ref, pi=chain.pi)
    np.testing.assert_array_equal(out["t"], [0, 1, 2, 3])
    assert set(out["distance"]) == {"total", "W_E", "W_P", "W_A"}
    np.testing.assert_allclose(out["distance"]["total"], [0, 0.06, 0.12, 0.18])
    assert out["threshold"] == 0.1 and out["departure_time"] == 2.0
    assert out["final_error"] == pytest.approx(0.18)
    assert out["error"] == pytest.approx(0.18)
    assert out["loss_gap"].shape == (4,) and out["loss_gap"][0] == 0.0
    tv = out["attention_tv"]
    assert tv.shape == (4, 3) and np.all(tv[0] < 1e-15) and np.all(tv[1:] > 1e-6)
    # a run that is NaN throughout has no finite error
    nan_run = _traj([0, 1], [jax.tree.map(lambda x: x * np.nan, model)] * 2, loss)
    assert np.isnan(compare(nan_run, ref)["error"])


def test_stage_times_formats():
    assert stage_times({"focus": 60}) == {"focus": 60.0}
    recs = [{"name": "focus", "start": 60.0}, {"name": "dilution", "t_start": None}]
    assert stage_times(recs) == {"focus": 60.0, "dilution": None}

    @dataclasses.dataclass
    class Stage:
        name: str
        time: float

    assert stage_times([Stage("escape", 15.0)]) == {"escape": 15.0}
    assert stage_times([{"name": "focus", "t": 4.0}]) == {"focus": 4.0}
    # gflow's own stages have no ``time`` attribute: their t_start is the time
    from gflow import Stage as GStage

    assert stage_times([GStage("focus", 2.0, 5.0, 1)]) == {"focus": 2.0}


def test_stage_shifts_difference(setup):
    """shift = t(run) - t(reference), stage by stage, for two different runs."""
    _, loss, model = setup
    run = _traj([0, 1], [model, model], loss)
    ref = _traj([0, 1], [model, model], loss)  # another object, same times
    times = {id(run): {"focus": 3.0, "dilution": 7.5}, id(ref): {"focus": 1.0}}
    shifts = stage_shifts(run, ref, lambda tr: times[id(tr)])
    assert shifts["focus"] == {"run": 3.0, "reference": 1.0, "shift": 2.0}
    # a stage only one run has gets no shift
    assert shifts["dilution"] == {"run": 7.5, "reference": None, "shift": None}
    # the sign flips with the roles, and compare() reports the same shifts
    back = compare(ref, run, stage_detector=lambda tr: times[id(tr)])
    assert back["stages"]["focus"]["shift"] == -2.0
    assert list(back["stages"]) == ["focus", "dilution"]


def test_richardson_removes_first_order_error(setup):
    _, loss, model = setup
    # θ_η(t) = θ(t) + η·c: the order-1 extrapolation recovers θ(t) exactly
    c = jnp.ones_like(model.W_E)

    def run(eta):
        models = [dataclasses.replace(model, W_E=model.W_E + eta * c)] * 2
        tr = _traj([0.0, 1.0], models, loss)
        return dataclasses.replace(tr, info={"lr": eta})

    ref = _traj([0.0, 1.0], [model] * 2, loss)
    out = richardson(run(0.2), run(0.1), ref, order=1.0)
    assert out["times"] == 2
    assert out["error"] == pytest.approx(0.0, abs=1e-12)


def test_richardson_at_second_order_on_uneven_grids(setup):
    """θ_η(t) = θ(t) + η² c: with p = 2 and η_a/η_b = 3, w = 1/8 cancels the error.

    Run a is saved at multiples of 0.3, run b at multiples of 0.1 (only their common
    times count), the reference at the same times with its last time repeated (as a
    sweep's padded reference is); times off by 1e-7 relative do not match.
    """
    _, loss, model = setup
    c = np.arange(model.W_E.size, dtype=float).reshape(model.W_E.shape) / 10
    W_E = np.asarray(model.W_E)

    def shifted(times, eta, jitter=0.0):
        t = np.asarray(times, float) * (1 + jitter)
        models = [
            dataclasses.replace(model, W_E=jnp.asarray(W_E * (1 + ti) + eta**2 * c))
            for ti in np.asarray(times, float)
        ]
        return dataclasses.replace(_traj(t, models, loss), info={"lr": eta})

    a = shifted(np.arange(3) * 0.3, 0.3)
    b = shifted(np.arange(7) * 0.1, 0.1)
    ref = shifted([0.0, 0.3, 0.6, 0.6, 0.6], 0.0)
    out = richardson(a, b, ref, order=2.0)
    assert out == {
        "error": pytest.approx(0.0, abs=1e-12),
        "times": 3,
        "lrs": [0.3, 0.1],
    }
    # at first order w = 1/2, which leaves an error of η_b² + (η_b² - η_a²)/2
    first = richardson(a, b, ref, order=1.0)["error"]
    assert first == pytest.approx(abs(0.01 - 0.04) * float(np.linalg.norm(c)), 1e-9)
    # times that differ by 1e-7 relative are not the same times
    late = shifted(np.arange(7) * 0.1, 0.1, jitter=1e-7)
    assert richardson(a, late, ref, order=2.0)["times"] == 1  # t = 0 alone
    late_ref = shifted([0.0, 0.3, 0.6], 0.0, jitter=1e-7)
    assert richardson(a, b, late_ref, order=2.0)["times"] == 1
    # near t = 0 only the absolute tolerance 1e-12 applies: 1e-10 is another time
    early = dataclasses.replace(b, t=np.r_[1e-10, b.t[1:]])
    assert richardson(a, early, ref, order=2.0)["times"] == 2
    early_ref = dataclasses.replace(ref, t=np.r_[1e-10, ref.t[1:]])
    assert richardson(a, b, early_ref, order=2.0)["times"] == 2
    assert richardson(a, b, shifted([0.0], 0.0, jitter=0.5), order=2.0)["times"] == 1
    nothing = {"error": None, "times": 0}
    assert richardson(a, b, shifted([0.05], 0.0), order=2.0) == nothing
    assert richardson(a, b, ref, order=float("nan")) == nothing


def test_sharpness_matches_dense_hessian(setup, key):
    _, loss, model = setup
    other = jax.tree.map(lambda x: 1.3 * x if eqx_is_float(x) else x, model)
    traj = _traj([0.0, 1.0], [model, other], loss)
    lam = sharpness_along(loss, traj, key=key, iters=60)
    hessian = eqx.filter_jit(dense_hessian)  # one program for both models
    dense = [
        np.linalg.eigvalsh(np.asarray(hessian(loss, m)))[-1] for m in (model, other)
    ]
    np.testing.assert_allclose(lam, dense, rtol=1e-8)


def eqx_is_float(x):
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating)


def test_stability_bounds():
    assert SGD().stability == 2.0
    assert Momentum(beta=0.9).stability == pytest.approx(3.8)
    assert Adam(beta=0.9).stability == pytest.approx(38.0)
    assert optimizer_named("momentum", 0.5) == Momentum(beta=0.5)
    with pytest.raises(ValueError, match="unknown optimizer 'lion'"):
        optimizer_named("lion")
    with pytest.raises(ValueError, match="beta must lie in"):
        Adam(beta=1.0)
    t = np.arange(4.0)
    lam = np.array([0.5, 1.0, 3.0, 5.0])
    assert predicted_departure(t, lam, 1.0, 2.0) == 2.0
    assert predicted_departure(t, lam, 0.1, 2.0) is None


def test_fit_order_recovers_a_power_law_and_skips_bad_errors():
    from gflow.analysis import fit_order

    lrs = np.array([0.4, 0.2, 0.1, 0.05])
    p, c = fit_order(lrs, 3.0 * lrs**1.5)
    assert p == pytest.approx(1.5, rel=1e-12) and c == pytest.approx(np.log(3.0))
    # NaN, inf and non-positive errors (diverged or exact members) are left out
    errs = np.r_[3.0 * lrs[:2] ** 2, np.nan, 0.0]
    assert fit_order(lrs, errs) == pytest.approx((2.0, np.log(3.0)), rel=1e-12)
    errs = np.r_[np.inf, -1.0, 3.0 * lrs[2:] ** 2]
    assert fit_order(lrs, errs) == pytest.approx((2.0, np.log(3.0)), rel=1e-12)
    assert np.isnan(fit_order(lrs, [1.0, np.nan, 0.0, np.inf])).all()


def test_a_comparison_is_typed_and_reads_as_the_dict_it_was():
    """compare returns a Comparison: its fields, and the mapping of those set
    (attention drift and stages only where asked), as the dict it returned."""
    import dataclasses

    from gflow.analysis import Comparison

    t = np.linspace(0.0, 1.0, 3)
    cmp = Comparison(
        t=t,
        distance={"total": t},
        loss_gap=t,
        error=1.0,
        final_error=1.0,
        departure_time=None,
        threshold=0.1,
    )
    assert set(cmp) == {
        "t",
        "distance",
        "loss_gap",
        "error",
        "final_error",
        "departure_time",
        "threshold",
    }
    assert cmp["error"] == cmp.error == 1.0 and cmp["departure_time"] is None
    assert "attention_tv" not in cmp and dict(cmp)["threshold"] == 0.1
    with_tv = dataclasses.replace(cmp, attention_tv=np.zeros((3, 2)))
    assert "attention_tv" in with_tv and len(with_tv) == len(cmp) + 1
