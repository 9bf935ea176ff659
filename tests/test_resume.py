import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gflow import (
    AttentionModel,
    MarkovChain,
    MarkovObservables,
    PopulationLoss,
    solve_flow,
)
from gflow.runs import solve_flow_resumable


@pytest.fixture(scope="module")
def setup():
    chain = MarkovChain.from_lambda(pi=(0.6, 0.3, 0.1), lam=0.5)
    model = AttentionModel.init(
        d_vocab=3, d_model=3, init_scale=0.3, key=jax.random.key(1)
    )
    return PopulationLoss(chain), model, MarkovObservables(chain)


@pytest.mark.slow
def test_interrupted_and_resumed_equals_uninterrupted(setup, tmp_path, monkeypatch):
    loss, model, obs = setup
    ts = np.linspace(0, 6, 25)
    kw = dict(
        t1=6.0,
        ts=ts,
        segments=3,
        observables=obs,
        rtol=1e-8,
        atol=1e-10,
        save_params=True,
    )
    full = solve_flow_resumable(loss, model, checkpoint_dir=tmp_path / "a", **kw)
    assert full.status == "success"
    np.testing.assert_allclose(full.t, ts)
    assert full.info["resumed_from_segment"] == -1
    # the segmented solve is the flow over [0, t1]: one plain solve_flow agrees to
    # the tolerance (the step-size controller restarts at each segment boundary)
    plain = solve_flow(
        loss,
        model,
        t1=6.0,
        ts=ts,
        observables=obs,
        rtol=1e-8,
        atol=1e-10,
        save_params=True,
    )
    assert plain.status == "success"
    np.testing.assert_array_equal(full.t, plain.t)
    for k in plain.metrics:
        np.testing.assert_allclose(
            full.metrics[k], plain.metrics[k], rtol=1e-6, atol=1e-9
        )
    np.testing.assert_allclose(full.params.W_E, plain.params.W_E, rtol=1e-6, atol=1e-9)
    # ... and the loss really moved, so agreement is not that of two resting states
    assert plain.metrics["loss"][-1] < plain.metrics["loss"][0] - 0.05

    # interrupt the run in its second segment, as a SIGTERM would
    ck = tmp_path / "b"
    real = solve_flow
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr("gflow.runs.resumable_flow.solve_flow", interrupted)
    with pytest.raises(KeyboardInterrupt):
        solve_flow_resumable(loss, model, checkpoint_dir=ck, **kw)
    monkeypatch.setattr("gflow.runs.resumable_flow.solve_flow", real)
    assert (ck / "segment-000.npz").exists()
    assert not (ck / "segment-001.npz").exists()
    again = solve_flow_resumable(loss, model, checkpoint_dir=ck, **kw)
    assert again.info["resumed_from_segment"] == 0
    np.testing.assert_array_equal(again.t, full.t)
    for k in full.metrics:
        np.testing.assert_array_equal(again.metrics[k], full.metrics[k])
    np.testing.assert_array_equal(again.final.W_E, full.final.W_E)
    # the snapshots survive the interruption too, one per saved time
    assert again.params.W_E.shape == (len(ts), *model.W_E.shape)
    np.testing.assert_array_equal(again.params.W_Q, full.params.W_Q)
    np.testing.assert_allclose(again.params.W_E[-1], again.final.W_E, rtol=1e-12)
    np.testing.assert_array_equal(again.params.W_E[0], model.W_E)
    np.testing.assert_allclose(
        [loss(again.snapshot(i)) for i in (5, 17)], again.metrics["loss"][[5, 17]]
    )


@pytest.mark.slow
def test_wrong_configuration_is_refused(setup, tmp_path):
    loss, model, _ = setup
    solve_flow_resumable(loss, model, t1=2.0, segments=2, checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match="different configuration"):
        solve_flow_resumable(
            loss, model, t1=2.0, segments=2, rtol=1e-3, checkpoint_dir=tmp_path
        )


@pytest.mark.slow
def test_resuming_with_another_loss_is_refused(setup, tmp_path):
    """Regression: the fingerprint ignored the loss, so resuming with another chain
    (same model, same settings) silently continued the wrong run."""
    loss, model, _ = setup
    solve_flow_resumable(loss, model, t1=2.0, segments=2, checkpoint_dir=tmp_path)
    other = PopulationLoss(MarkovChain.from_lambda(pi=(0.5, 0.3, 0.2), lam=0.5))
    with pytest.raises(ValueError, match="different configuration"):
        solve_flow_resumable(other, model, t1=2.0, segments=2, checkpoint_dir=tmp_path)
    # the same loss rebuilt from the same chain is the same run: it resumes
    again = solve_flow_resumable(
        PopulationLoss(MarkovChain.from_lambda(pi=(0.6, 0.3, 0.1), lam=0.5)),
        model,
        t1=2.0,
        segments=2,
        checkpoint_dir=tmp_path,
    )
    assert again.info["resumed_from_segment"] == 1


class _Cubic(eqx.Module):
    """L(θ) = −Σθ³/3: the flow dθ/dt = θ² blows up at t = 1/θ₀."""

    def __call__(self, model):
        return -jnp.sum(model.theta**3) / 3.0


class _Point(eqx.Module):
    theta: jax.Array


@pytest.mark.slow
def test_a_failed_segment_is_checkpointed_and_not_recomputed(tmp_path, monkeypatch):
    """Regression: a segment that hit NaN kept its partial trajectory but wrote no
    checkpoint, so a resume recomputed it (and lost what it had shown)."""
    model = _Point(jnp.array([4.0 / 3.0]))  # blows up at t = 0.75, in segment 1
    kw = dict(t1=1.5, segments=3, ts=np.linspace(0, 1.5, 16), max_steps=2000)
    first = solve_flow_resumable(_Cubic(), model, checkpoint_dir=tmp_path, **kw)
    assert first.status != "success"
    assert 0.5 < first.t[-1] <= 0.75
    # the partial segment 1 is on disk with its status; segment 2 never started
    assert (tmp_path / "segment-001.npz").exists()
    assert not (tmp_path / "segment-002.npz").exists()
    with np.load(tmp_path / "segment-001.npz") as data:
        assert str(data["status"]) == first.status

    def fail(*args, **kwargs):
        raise AssertionError("a checkpointed segment was solved again")

    monkeypatch.setattr("gflow.runs.resumable_flow.solve_flow", fail)
    again = solve_flow_resumable(_Cubic(), model, checkpoint_dir=tmp_path, **kw)
    assert again.status == first.status
    np.testing.assert_array_equal(again.t, first.t)
    np.testing.assert_array_equal(again.metrics["loss"], first.metrics["loss"])
    np.testing.assert_allclose(
        first.metrics["loss"][0], -((4 / 3) ** 3) / 3, rtol=1e-12
    )


@pytest.mark.slow  # three solves (6 s): CI's slow steps
def test_a_gap_in_the_segments_resumes_at_the_gap(setup, tmp_path):
    """A deleted middle segment: the run recomputes it and reports resuming after
    the segments before the gap (it said "after segment 2/3", counting files)."""
    loss, model, _ = setup
    kw = dict(t1=1.5, segments=3, checkpoint_dir=tmp_path)
    full = solve_flow_resumable(loss, model, **kw)
    (tmp_path / "segment-001.npz").unlink()
    again = solve_flow_resumable(loss, model, **kw)
    assert again.info["resumed_from_segment"] == 0
    assert (tmp_path / "segment-001.npz").exists()
    np.testing.assert_array_equal(again.t, full.t)
    np.testing.assert_array_equal(again.final.W_E, full.final.W_E)
