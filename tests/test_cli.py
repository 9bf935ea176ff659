import json
import os

import numpy as np
import pytest

from gflow.cli import main
from gflow.runs import load_run


@pytest.mark.slow
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
def test_bad_settings_exit_2_with_one_line(args, words, capsys):
    assert main(["flow", *args]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], err
    assert lines[0].startswith("gflow flow: error: ")
    assert "Traceback" not in err


def _one_error_line(capsys, *words):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for word in words:
        assert word in lines[0], err
    return lines[0]


def test_repeated_step_size_is_refused_before_anything_runs(tmp_path, capsys):
    """It used to end in a ZeroDivisionError traceback from the Richardson fit, after
    the members had run (and the run directory was written)."""
    out = tmp_path / "run"
    argv = ["sweep", "--lrs", "0.1,0.2,0.1", "--t1", "1", "--out", str(out)]
    assert main(argv) == 2
    _one_error_line(capsys, "gflow sweep: error: lrs:", "distinct", "0.1")
    assert not out.exists()


def test_step_size_larger_than_t1_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["sweep", "--lrs", "50,0.1", "--t1", "20", "--out", str(out)]
    assert main(argv) == 2
    _one_error_line(capsys, "gflow sweep: error: lrs:", "50", "t1 = 20")
    assert not out.exists()
    argv = ["compare", "--lr", "5", "--t1", "1", "--out", str(out)]
    assert main(argv) == 2
    _one_error_line(capsys, "gflow compare: error: lr:", "5", "t1 = 1")
    assert not out.exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["flow"],
        ["sweep"],
        ["compare"],
        ["text", "--corpus", "corpus.txt"],
    ],
    ids=lambda argv: argv[0],
)
def test_out_that_is_a_file_is_refused_by_every_command(tmp_path, capsys, argv):
    """`--out FILE` used to end in a FileExistsError traceback (flow, sweep, compare,
    text); every command's --out is now checked when the options are parsed."""
    (tmp_path / "corpus.txt").write_text("the cat sat on the mat. " * 50)
    argv = [a if a != "corpus.txt" else str(tmp_path / a) for a in argv]
    file = tmp_path / "file"
    file.write_text("keep me")
    assert main([*argv, "--out", str(file)]) == 2
    line = _one_error_line(capsys, f"gflow {argv[0]}: error: argument --out:")
    assert "not a directory" in line
    assert main([*argv, "--out", str(file / "sub")]) == 2
    _one_error_line(capsys, "argument --out:", "not a directory")
    assert file.read_text() == "keep me"


_EVERY_RUN_COMMAND = [["flow"], ["sweep"], ["compare"], ["train"], ["text"]]


def _corpus_args(argv, tmp_path):
    if argv[0] != "text":
        return argv
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat. " * 50)
    return [*argv, "--corpus", str(corpus)]


@pytest.mark.parametrize("argv", _EVERY_RUN_COMMAND, ids=lambda argv: argv[0])
def test_run_directory_that_cannot_be_locked_is_one_line(tmp_path, capsys, argv):
    """An OSError from making or locking the run directory (here its lock file's
    place taken by a folder: fails even as root) used to end in a traceback."""
    argv = _corpus_args(argv, tmp_path)
    out = tmp_path / "run"
    (out / ".gflow.lock").mkdir(parents=True)
    assert main([*argv, "--out", str(out)]) == 2
    line = _one_error_line(capsys, f"gflow {argv[0]}: error: --out {out}:")
    assert "Is a directory" in line and "Traceback" not in line
    assert [p.name for p in out.iterdir()] == [".gflow.lock"]  # nothing written


@pytest.mark.parametrize("argv", _EVERY_RUN_COMMAND, ids=lambda argv: argv[0])
def test_run_directory_name_too_long_is_one_line(tmp_path, capsys, argv):
    """A name the file system refuses (ENAMETOOLONG) ended in a traceback while the
    options were parsed."""
    argv = _corpus_args(argv, tmp_path)
    out = tmp_path / ("r" * 300)
    assert main([*argv, "--out", str(out)]) == 2
    _one_error_line(capsys, f"gflow {argv[0]}: error: argument --out:", "too long")
    assert not os.path.lexists(out)


@pytest.mark.skipif(not os.path.isdir("/sys/kernel"), reason="no sysfs here")
def test_out_under_sys_is_one_line(capsys):
    """Issue 56's case: as root ``os.access`` passes /sys, and making the directory
    there ended in a PermissionError traceback."""
    assert main(["flow", "--out", "/sys/gflow-run"]) == 2
    _one_error_line(capsys, "gflow flow: error:", "--out", "/sys")
    assert not os.path.lexists("/sys/gflow-run")


def test_report_out_that_is_a_directory_is_refused(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"command": "flow"}))
    assert main(["report", str(tmp_path), "--out", str(tmp_path)]) == 2
    _one_error_line(capsys, "gflow report: error: argument --out:", "is a directory")
    assert not (tmp_path / "report.html").exists()


def test_argparse_errors_are_one_line_naming_the_option(capsys):
    assert main(["flow", "--t1", "x"]) == 2
    _one_error_line(capsys, "gflow flow: error: argument --t1:", "a number", "'x'")
    assert main(["sweep", "--optimizer", "sgdd"]) == 2
    _one_error_line(capsys, "gflow sweep: error: argument --optimizer:", "'sgd'")
    assert main(["compare", "--no-such-option", "3"]) == 2
    _one_error_line(capsys, "gflow compare: error: unrecognized", "--no-such-option")
    assert main(["flow", "--no-params=yes"]) == 2
    _one_error_line(capsys, "gflow flow: error: argument --no-params")
    assert main([]) == 2
    _one_error_line(capsys, "gflow: error:", "command")
    assert main(["flow", "--help"]) == 0
    assert "--d-model" in capsys.readouterr().out


def test_config_and_resume_errors_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{t1: 3}")
    assert main(["flow", "--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not valid JSON (line 1" in err[0]
    assert main(["flow", "--resume", str(tmp_path / "nope")]) == 2
    assert "no config.json" in capsys.readouterr().err
    assert main(["flow", "--resume", ""]) == 2
    assert "argument --resume: expected the directory" in capsys.readouterr().err
    (tmp_path / "cfg.json").write_text(json.dumps({"t1": -4}))
    assert main(["flow", "--config", str(tmp_path / "cfg.json")]) == 2
    assert "t1: must be > 0" in capsys.readouterr().err
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"config": {"t1": 5.0}}))
    assert main(["flow", "--resume", str(run), "--t1", "9", "--no-params"]) == 2
    assert "drop --t1, --no-params" in capsys.readouterr().err
