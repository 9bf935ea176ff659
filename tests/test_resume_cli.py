"""Kill a real `gflow flow` part-way (SIGTERM, SIGKILL), resume it, and compare."""

import json
import os
import signal
import subprocess
import sys
import time

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


def _gflow(*args, **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "gflow", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def _kill_after_first_checkpoint(out, sig):
    proc = _gflow(*ARGS, "--out", str(out))
    ckpt = out / "checkpoint" / "checkpoint.json"
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if ckpt.exists() and json.loads(ckpt.read_text())["segment"] >= 0:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be interrupted"
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def _metrics(run_dir):
    with np.load(run_dir / "flow_metrics.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("full") / "run"
    proc = _gflow(*ARGS, "--out", str(out))
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err
    return _metrics(out)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_run_resumes_to_the_uninterrupted_result(tmp_path, uninterrupted, sig):
    out = tmp_path / "run"
    rc, err = _kill_after_first_checkpoint(out, sig)
    if sig == signal.SIGTERM:
        assert rc == 130 and "--resume" in err and "Traceback" not in err
    else:
        assert rc == -signal.SIGKILL
    assert not (out / "flow_metrics.npz").exists()
    proc = _gflow("--quiet", "flow", "--resume", str(out))
    stdout, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err
    assert "resumed after segment" in stdout
    resumed = _metrics(out)
    assert resumed.keys() == uninterrupted.keys()
    for k in uninterrupted:  # bit-identical, not just close
        np.testing.assert_array_equal(resumed[k], uninterrupted[k], err_msg=k)
    assert "resuming after segment" in (out / "gflow.log").read_text()
