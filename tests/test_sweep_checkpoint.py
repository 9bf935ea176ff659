import numpy as np
import optax
import pytest

from gflow.dynamics import run_sweep
from gflow.runs import chunk_path, run_sweep_resumable

LRS = [0.2, 0.1, 0.05, 0.04, 0.02]


@pytest.fixture(scope="module")
def sgd_setup(setup):
    """conftest's small chain and model, with plain SGD (learning rate injected)."""
    return (*setup, optax.inject_hyperparams(optax.sgd)(learning_rate=0.1))


def _fields(run):
    return (
        run.lrs,
        run.t,
        run.steps,
        run.loss,
        run.diverged_step,
        run.first_rise_step,
        run.rises,
        run.params.W_E,
    )


@pytest.mark.slow
def test_chunked_sweep_equals_one_program(sgd_setup, tmp_path):
    loss, model, opt = sgd_setup
    kw = dict(t1=1.0, num_saves=5)
    whole = run_sweep(loss, model, opt, LRS, **kw)
    chunked = run_sweep_resumable(
        loss, model, opt, LRS, checkpoint_dir=tmp_path, fingerprint="a", chunk=2, **kw
    )
    assert [chunk_path(tmp_path, i).exists() for i in range(4)] == [1, 1, 1, 0]
    assert chunked.info["resumed_chunks"] == 0 and chunked.info["chunk"] == 2
    for a, b in zip(_fields(whole), _fields(chunked)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    assert [chunked.status(m) for m in range(5)] == ["success"] * 5
    np.testing.assert_allclose(chunked.member(4).t, whole.member(4).t)


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_interrupted_sweep_resumes_without_recomputing(
    sgd_setup, tmp_path, monkeypatch
):
    loss, model, opt = sgd_setup
    kw = dict(t1=1.0, num_saves=5, fingerprint="cfg", chunk=2)
    full = run_sweep_resumable(
        loss, model, opt, LRS, checkpoint_dir=tmp_path / "a", **kw
    )

    real, calls, kill = run_sweep, [], [True]

    def counted(*args, **kwargs):
        calls.append(args[3].tolist())
        if len(calls) == 2 and kill[0]:  # killed while the second chunk runs
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr("gflow.runs.resumable_sweep.run_sweep", counted)
    with pytest.raises(KeyboardInterrupt):
        run_sweep_resumable(loss, model, opt, LRS, checkpoint_dir=tmp_path / "b", **kw)
    assert chunk_path(tmp_path / "b", 0).exists()
    assert not chunk_path(tmp_path / "b", 1).exists()
    calls.clear()
    kill[0] = False
    again = run_sweep_resumable(
        loss, model, opt, LRS, checkpoint_dir=tmp_path / "b", **kw
    )
    # chunk 0 was read back; chunks 1 and 2 (padded to two members) were run
    assert calls == [[0.05, 0.04], [0.02, 0.02]]
    assert again.info["resumed_chunks"] == 1
    for a, b in zip(_fields(full), _fields(again)):
        np.testing.assert_array_equal(a, b)


def test_a_chunk_of_another_sweep_is_refused(sgd_setup, tmp_path):
    loss, model, opt = sgd_setup
    kw = dict(t1=1.0, num_saves=5, checkpoint_dir=tmp_path, chunk=2)
    run_sweep_resumable(loss, model, opt, [0.2, 0.1], fingerprint="x", **kw)
    with pytest.raises(ValueError, match="different configuration"):
        run_sweep_resumable(loss, model, opt, [0.2, 0.1], fingerprint="y", **kw)
    with pytest.raises(ValueError, match="chunk must be"):
        run_sweep_resumable(
            loss, model, opt, [0.2], fingerprint="x", **{**kw, "chunk": 0}
        )


def test_sweep_config_round_trips_through_json_and_resume_errors(tmp_path, capsys):
    import dataclasses
    import json

    from gflow.cli import main
    from gflow.runs import SweepConfig

    cfg = SweepConfig(optimizer="momentum", lrs=(0.3, 0.1), chunk=3, beta=0.5)
    back = SweepConfig.from_json(json.loads(json.dumps(dataclasses.asdict(cfg))))
    assert back == cfg and back.fingerprint() == cfg.fingerprint()
    # the members do not depend on the reference, so neither does the fingerprint
    modified = dataclasses.replace(cfg, threshold=0.5)
    assert modified.fingerprint() == cfg.fingerprint()
    assert dataclasses.replace(cfg, lrs=(0.3,)).fingerprint() != cfg.fingerprint()

    assert main(["sweep", "--resume", str(tmp_path / "nope")]) == 2
    assert "no config.json" in capsys.readouterr().err
    assert main(["sweep", "--chunk", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "chunk: must be >= 1" in err[0]


def test_load_run_gives_a_sweep_back(sgd_setup, tmp_path):
    from gflow import load_run
    from gflow.runs import FlowConfig, RunDirectory, SweepConfig, write_json

    # the configuration of sgd_setup's chain and model, so nothing recompiles
    flow = FlowConfig(pi=(0.6, 0.3, 0.1), lam=0.5, d_model=3, init_scale=0.3, seed=1)
    cfg = SweepConfig(lrs=(0.2, 0.1, 0.05), t1=1.0, num_saves=5, chunk=2, flow=flow)
    RunDirectory(tmp_path).write_config("sweep", cfg, environment=None)
    loss, model, opt = sgd_setup
    np.testing.assert_array_equal(flow.model().W_Q, model.W_Q)
    run = run_sweep_resumable(
        loss,
        model,
        opt,
        cfg.lrs,
        t1=cfg.t1,
        num_saves=cfg.num_saves,
        checkpoint_dir=tmp_path / "checkpoint",
        fingerprint=cfg.fingerprint(),
        chunk=cfg.chunk,
    )
    write_json(tmp_path / "sweep.json", {"order": 1.0})
    back = load_run(tmp_path)
    assert back["sweep"] == {"order": 1.0}
    members = back["members"]
    np.testing.assert_array_equal(members.lrs, cfg.lrs)
    np.testing.assert_array_equal(members.loss, run.loss)
    tr = members.member(2)  # a Trajectory of the third member
    np.testing.assert_array_equal(tr.params.W_Q, run.member(2).params.W_Q)
    assert tr.t[-1] == pytest.approx(1.0) and tr.status == "success"
