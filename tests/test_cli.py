import json
import subprocess
import sys

import numpy as np
import pytest

from gflow.cli import main
from gflow.io import load_run


def test_flow_command_writes_a_run_directory(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(
        [
            "--quiet",
            "flow",
            "--t1",
            "30",
            "--num-saves",
            "31",
            "--segments",
            "3",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    for name in (
        "config.json",
        "flow_metrics.csv",
        "flow_metrics.npz",
        "flow_final.eqx",
        "flow.json",
        "flow.png",
    ):
        assert (out / name).stat().st_size > 0, name
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["config"]["t1"] == 30.0 and cfg["config"]["init_scale"] == 1e-3
    assert cfg["environment"]["versions"]["jax"]
    run = load_run(out)
    tr = run["flow"]
    assert tr.t[-1] == 30.0 and len(tr) == 31
    assert tr.metrics["loss"][0] == pytest.approx(np.log(4), abs=1e-5)
    # by t = 30 the flow has condensed onto the unigram plateau H(π)
    assert tr.metrics["loss"][-1] == pytest.approx(
        cfg["references"]["unigram_loss"], abs=0.01
    )
    assert "flow success" in capsys.readouterr().out
    # parameter snapshots at every saved time, the last one the final model
    assert tr.params.W_E.shape == (31, 4, 32)
    np.testing.assert_allclose(tr.params.W_P[-1], tr.final.W_P, rtol=1e-12)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--t1", "-1"], "t1"),
        (["--pi", "0.5,0.6"], "sum to 1"),
        (["--lam", "1.5"], "lam"),
        (["--solver", "rk99"], "unknown solver"),
        (["--init-scale", "0"], "init_scale"),
    ],
)
def test_bad_settings_exit_2_with_one_line(args, words):
    proc = subprocess.run(
        [sys.executable, "-m", "gflow.cli", "flow", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_config_and_resume_errors_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{t1: 3}")
    assert main(["flow", "--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not valid JSON (line 1" in err[0]
    assert main(["flow", "--resume", str(tmp_path / "nope")]) == 2
    assert "no config.json" in capsys.readouterr().err
    (tmp_path / "cfg.json").write_text(json.dumps({"t1": -4}))
    assert main(["flow", "--config", str(tmp_path / "cfg.json")]) == 2
    assert "t1: must be > 0" in capsys.readouterr().err
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"config": {"t1": 5.0}}))
    assert main(["flow", "--resume", str(run), "--t1", "9", "--no-params"]) == 2
    assert "drop --t1, --no-params" in capsys.readouterr().err
