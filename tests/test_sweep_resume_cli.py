"""Kill a real `gflow sweep` part-way (SIGTERM, SIGKILL), resume it, and compare."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow

# six members in chunks of two: the first chunk is saved long before the last one
ARGS = [
    "--quiet",
    "sweep",
    "--optimizer",
    "sgd",
    "--lrs",
    "0.4,0.2,0.1,0.05,0.02,0.01",
    "--t1",
    "60",
    "--chunk",
    "2",
    "--no-shard",
]


def _gflow(*args):
    return subprocess.Popen(
        [sys.executable, "-m", "gflow", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _members(run_dir):
    res = json.loads((run_dir / "sweep.json").read_text())
    return res["order"], res["members"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("full") / "run"
    proc = _gflow(*ARGS, "--out", str(out))
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err
    return _members(out)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_sweep_resumes_without_recomputing(tmp_path, uninterrupted, sig):
    out = tmp_path / "run"
    proc = _gflow(*ARGS, "--out", str(out))
    first = out / "checkpoint" / "members-000.npz"
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None and not first.exists():
        time.sleep(0.05)
    assert proc.poll() is None, "the sweep finished before it could be interrupted"
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=120)
    if sig == signal.SIGTERM:
        assert proc.returncode == 130 and "--resume" in err
        assert "Traceback" not in err
    else:
        assert proc.returncode == -signal.SIGKILL
    assert not (out / "sweep.json").exists()
    saved = first.stat().st_mtime_ns

    proc = _gflow("--quiet", "sweep", "--resume", str(out))
    stdout, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err
    assert "chunk(s) resumed" in stdout
    assert first.stat().st_mtime_ns == saved  # read back, not recomputed
    assert "read back" in (out / "gflow.log").read_text()
    order, members = _members(out)
    assert order == uninterrupted[0]
    assert members == uninterrupted[1]  # every number identical
