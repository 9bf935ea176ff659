"""Run directories written before the package was reshaped still load and report.

tests/data/legacy_runs holds one directory of each command, written by gflow at
commit 3892db1 (its README has the commands). Also the regressions found when the
runs were tried as a new user would: a float64 run loaded in a fresh process
without x64, and the report of a ``gflow text`` directory.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gflow
from gflow import load_run, write_report

LEGACY = Path(__file__).parent / "data" / "legacy_runs"


@pytest.fixture
def legacy(tmp_path):
    """A writable copy of the legacy run directories (the report writes into them)."""
    shutil.copytree(LEGACY, tmp_path / "runs")
    return tmp_path / "runs"


def test_legacy_flow_run_loads(legacy):
    run = load_run(legacy / "flow")
    flow = run["flow"]
    assert run["config"]["command"] == "flow"
    assert flow.status == "success" and len(flow) == 6
    assert flow.params.W_E.shape == (6, 4, 4)
    np.testing.assert_allclose(flow.params.W_E[-1], flow.final.W_E, rtol=1e-12)
    # the saved loss is the loss of the saved model (float64 written, float64 read)
    loss = gflow.PopulationLoss(
        gflow.MarkovChain.from_lambda(pi=(0.75, 0.19, 0.05, 0.01), lam=0.5)
    )
    np.testing.assert_allclose(
        float(loss(flow.final)), flow.metrics["loss"][-1], rtol=1e-12
    )


def test_legacy_sweep_run_loads_with_the_unified_status_words(legacy):
    run = load_run(legacy / "sweep")
    assert [m["status"] for m in run["sweep"]["members"]] == ["success", "success"]
    members = run["members"]
    np.testing.assert_array_equal(members.lrs, [0.5, 0.25])
    assert members.status(0) == "success"
    assert members.member(1).t[-1] == pytest.approx(2.0)


def test_legacy_compare_and_text_runs_load(legacy):
    compare = load_run(legacy / "compare")
    assert {"flow", "optimizer"} <= set(compare)
    np.testing.assert_allclose(compare["optimizer"].t, compare["flow"].t, rtol=1e-12)
    text = load_run(legacy / "text")
    assert {"gd", "adam"} <= set(text)
    assert np.all(np.isfinite(text["gd"].metrics["loss"]))


@pytest.mark.parametrize("name", ["flow", "sweep", "compare", "text"])
def test_legacy_run_reports(legacy, name):
    html = write_report(legacy / name).read_text()
    assert f": {name}</h1>" in html and "<h2>Configuration</h2>" in html
    assert "Traceback" not in html


def test_report_of_a_text_run_shows_each_runs_stages(legacy):
    """Regression: the stage table of a ``gflow text`` directory (a dict per run,
    not a list of stages) ended the report in AttributeError."""
    html = write_report(legacy / "text").read_text()
    assert "<h3>gd</h3>" in html and "<h3>adam</h3>" in html
    assert "no stages detected: ValueError: detect_stages needs" in html


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_float64_run_loads_in_a_fresh_process_without_x64(legacy):
    """Regression: load_run in a process without x64 (a notebook) raised
    "Deserialised leaf ... changed dtype from float32 ... to float64"."""
    code = (
        "import json, sys, jax, gflow\n"
        "assert not jax.config.jax_enable_x64\n"
        "run = gflow.load_run(sys.argv[1])\n"
        "f = run['flow']\n"
        "print(json.dumps([str(f.final.W_E.dtype), str(f.params.W_E.dtype),\n"
        "                  str(f.metrics['loss'].dtype)]))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "JAX_ENABLE_X64"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(legacy / "flow")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["float64", "float64", "float64"]


def test_resuming_a_legacy_flow_checkpoint_is_a_clear_error(legacy, capsys):
    from gflow.cli import main

    assert main(["flow", "--resume", str(legacy / "flow")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "checkpoint of gflow < 0.2" in err[0]
    assert "new output directory" in err[0]
