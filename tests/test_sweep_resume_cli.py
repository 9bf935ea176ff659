"""Kill a real `gflow sweep` part-way (SIGTERM, SIGKILL), resume it, and compare."""

import json
import signal

import pytest

from gflow import load_run

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


def _members(run_dir):
    res = json.loads((run_dir / "sweep.json").read_text())
    return res["order"], res["members"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, gflow_process):
    out = tmp_path_factory.mktemp("full") / "run"
    gflow_process.run(*ARGS, "--out", str(out))
    return _members(out)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_sweep_resumes_without_recomputing(
    tmp_path, uninterrupted, gflow_process, sig
):
    out = tmp_path / "run"
    first = out / "checkpoint" / "members-000.npz"
    rc, err = gflow_process.interrupt([*ARGS, "--out", str(out)], first.exists, sig)
    if sig == signal.SIGTERM:
        assert rc == 130 and "--resume" in err
        assert "Traceback" not in err
    else:
        assert rc == -signal.SIGKILL
    assert not (out / "sweep.json").exists()
    saved = first.stat().st_mtime_ns

    stdout = gflow_process.run("--quiet", "sweep", "--resume", str(out))
    assert "chunk(s) resumed" in stdout
    assert first.stat().st_mtime_ns == saved  # read back, not recomputed
    assert "read back" in (out / "gflow.log").read_text()
    order, members = _members(out)
    assert order == uninterrupted[0]
    assert members == uninterrupted[1]  # every number identical
    back = load_run(out)["members"]  # the saved members, as a SweepRun
    assert back.lrs.tolist() == [m["lr"] for m in members]
