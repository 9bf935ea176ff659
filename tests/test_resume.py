import jax
import numpy as np
import pytest

import gflow.resume as resume
from gflow import (
    AttentionModel,
    MarkovChain,
    MarkovObservables,
    PopulationLoss,
    solve_flow,
)
from gflow.resume import CHECKPOINT, solve_flow_resumable


@pytest.fixture(scope="module")
def setup():
    chain = MarkovChain.from_lambda(pi=(0.6, 0.3, 0.1), lam=0.5)
    model = AttentionModel.init(
        d_vocab=3, d_model=3, init_scale=0.3, key=jax.random.key(1)
    )
    return PopulationLoss(chain), model, MarkovObservables(chain)


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
    real = resume.solve_flow
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(resume, "solve_flow", interrupted)
    with pytest.raises(KeyboardInterrupt):
        solve_flow_resumable(loss, model, checkpoint_dir=ck, **kw)
    monkeypatch.setattr(resume, "solve_flow", real)
    assert (ck / CHECKPOINT).exists()
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


def test_wrong_configuration_is_refused(setup, tmp_path):
    loss, model, _ = setup
    solve_flow_resumable(loss, model, t1=2.0, segments=2, checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match="different configuration"):
        solve_flow_resumable(
            loss, model, t1=2.0, segments=2, rtol=1e-3, checkpoint_dir=tmp_path
        )
