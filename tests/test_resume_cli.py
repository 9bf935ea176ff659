"""Kill a real `gflow flow` part-way (SIGTERM, SIGKILL), resume it, and compare."""

import signal

import numpy as np
import pytest

pytestmark = pytest.mark.slow

# long enough that segments finish one by one after the ~30 s compile (stiff late flow)
ARGS = [
    "--quiet",
    "flow",
    "--t1",
    "2000",
    "--num-saves",
    "41",
    "--segments",
    "8",
    "--solver",
    "tsit5",
]


def _checkpointed(out):
    return (out / "checkpoint" / "segment-000.npz").exists()


def _metrics(run_dir):
    with np.load(run_dir / "flow_metrics.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, gflow_process):
    out = tmp_path_factory.mktemp("full") / "run"
    gflow_process.run(*ARGS, "--out", str(out))
    return _metrics(out)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_run_resumes_to_the_uninterrupted_result(
    tmp_path, uninterrupted, gflow_process, sig
):
    out = tmp_path / "run"
    rc, err = gflow_process.interrupt(
        [*ARGS, "--out", str(out)], lambda: _checkpointed(out), sig
    )
    if sig == signal.SIGTERM:
        assert rc == 130 and "--resume" in err and "Traceback" not in err
    else:
        assert rc == -signal.SIGKILL
    assert not (out / "flow_metrics.npz").exists()
    stdout = gflow_process.run("--quiet", "flow", "--resume", str(out))
    assert "resumed after segment" in stdout
    resumed = _metrics(out)
    assert resumed.keys() == uninterrupted.keys()
    for k in uninterrupted:  # bit-identical, not just close
        np.testing.assert_array_equal(resumed[k], uninterrupted[k], err_msg=k)
    assert "resuming after segment" in (out / "gflow.log").read_text()
