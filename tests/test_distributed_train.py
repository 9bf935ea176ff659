"""Training sweeps (``gflow train --seeds K --lrs ...``) and ``gflow text --seeds K``
over several processes (issue 17, point 4): the members, the options' checks, and
real runs of two processes joined by jax.distributed on this machine (slow)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gflow import load_run, write_report
from gflow.cli import main
from gflow.runs import deal
from gflow.runs.train import TrainConfig, TrainSweep, gather

SMALL = [
    "--steps",
    "8",
    "--num-saves",
    "5",
    "--segments",
    "2",
    "--seq-len",
    "6",
    "--batch",
    "4",
    "--eval-batch",
    "8",
    "--d-model",
    "4",
    "--layers",
    "2",
    "--heads",
    "2",
]
SWEEP = ["train", *SMALL, "--seeds", "2", "--lrs", "0.01,0.005"]
MEMBERS = ["train_lr0.01_s0", "train_lr0.01_s1", "train_lr0.005_s0", "train_lr0.005_s1"]


# -- the members and their processes -------------------------------------------------


def test_members_are_named_by_step_size_and_seed():
    cfg = TrainConfig(seed=3, lr=0.02)
    both = TrainSweep(seeds=2, lrs=(0.01, 0.005)).members(cfg)
    assert [n for n, _ in both] == [
        "train_lr0.01_s3",
        "train_lr0.01_s4",
        "train_lr0.005_s3",
        "train_lr0.005_s4",
    ]
    assert [(m.lr, m.seed) for _, m in both] == [
        (0.01, 3),
        (0.01, 4),
        (0.005, 3),
        (0.005, 4),
    ]
    assert [n for n, _ in TrainSweep(seeds=2).members(cfg)] == ["train_s3", "train_s4"]
    assert TrainSweep(seeds=2).members(cfg)[1][1].lr == 0.02  # the base step size
    assert [n for n, _ in TrainSweep(lrs=(1 / 3,)).members(cfg)] == [
        "train_lr0.3333333333333333"
    ]
    assert not TrainSweep().is_sweep and TrainSweep(lrs=(0.1,)).is_sweep
    # equal members are dealt out in turn, whatever their number
    assert deal(4, 2) == [0, 1, 0, 1] and deal(3, 2) == [0, 1, 0]
    assert deal(2, 1) == [0, 0]


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(seeds=0), "seeds: must be >= 1"),
        (dict(lrs=()), "lrs: give at least one"),
        (dict(lrs=(0.1, 0.0)), "lrs: every step size must be > 0"),
        (dict(lrs=(float("nan"),)), "lrs: every step size must be > 0"),
        (dict(lrs=(0.1, 0.1)), "lrs: a step size is repeated"),
    ],
)
def test_a_sweep_validates_itself(kwargs, words):
    with pytest.raises(ValueError, match=words):
        TrainSweep(**kwargs)


def test_workers_start_from_the_configuration_on_disk(tmp_path):
    """--processes writes config.json first; each worker reads the base run and
    its members back from it, exactly."""
    from gflow.runs import RunDirectory
    from gflow.runs.train import TrainRun

    for cfg, sweep in (
        (
            TrainConfig(
                lr=0.1 + 0.2,
                seed=7,
                d_ff=6,
                value=True,
                x64=True,
                schedule="warmup-cosine",
                warmup=0.25,
            ),
            TrainSweep(seeds=3),
        ),
        (
            TrainConfig(optimizer="sgd", layernorm=True, residual=True, max_len=80),
            TrainSweep(lrs=(0.4, 1 / 3)),
        ),
        (TrainConfig(), TrainSweep(seeds=2, lrs=(0.01,))),
    ):
        run = RunDirectory(tmp_path / f"run-{cfg.fingerprint()}-{sweep.seeds}")
        run.write_config("train", TrainRun(cfg, sweep), environment=None)
        back = run.read_config(TrainRun, "train", "--resume")
        assert (back.base, back.sweep) == (cfg, sweep)


def test_text_workers_start_from_the_configuration_on_disk(tmp_path, monkeypatch):
    from gflow.runs import RunDirectory
    from gflow.runs.text import TextConfig

    monkeypatch.chdir(tmp_path)
    Path("t.json").write_text("{}")  # a tokenizer_file must exist
    for i, cfg in enumerate(
        (
            TextConfig(
                corpus="c.txt",
                seeds=3,
                seed=5,
                lr=0.1 + 0.2,
                track=("a", "b"),
                all_positions=True,
                positional=True,
                max_chars=900,
                optimizer="adamw",
                schedule="warmup-cosine",
                weight_decay=0.05,
            ),
            TextConfig(
                corpus="c.txt",
                seeds=2,
                method="flow",
                x64=True,
                batch=4,
                optimizer="sgd",
                clip=1.5,
                download=True,
                tokenizer="bpe",
                tokenizer_file="t.json",
            ),
        )
    ):
        run = RunDirectory(tmp_path / f"run-{i}")
        run.write_config("text", cfg, environment=None)
        assert run.read_config(TextConfig, "text", "--resume") == cfg


# -- every new option refuses bad values in one line, before anything runs ----------


@pytest.mark.parametrize(
    "tail, words",
    [
        (["--processes", "2"], "--processes 2: the run has 1 member(s)"),
        (["--seeds", "2", "--processes", "3"], "the run has 2 member(s), so 1"),
        (["--lrs", "0.01,-0.1"], "lrs: every step size must be > 0"),
        (["--lrs", "0.01,0"], "lrs: every step size must be > 0"),
        (["--lrs", "0.01,0.01"], "lrs: a step size is repeated"),
        (["--lrs", "0.01,x"], "--lrs: expected comma-separated numbers"),
        (["--lr", "0.1", "--lrs", "0.1,0.2"], "--lr and --lrs: give one"),
        (["--seeds", "0"], "seeds: must be >= 1"),
        (["--seed", str(2**32 - 1), "--seeds", "2"], "seeds: seed + seeds - 1"),
        (["--seeds", "2", "--join-timeout", "5"], "--join-timeout applies only"),
        (
            [
                "--seeds",
                "2",
                "--coordinator",
                "h:1",
                "--num-processes",
                "2",
                "--process-id",
                "1",
            ],
            "--coordinator: give --out DIR",
        ),
    ],
)
def test_train_options_refuse_bad_values_in_one_line(tmp_path, capsys, tail, words):
    out = tmp_path / "run"
    argv = ["--quiet", "train", *SMALL, *tail]
    argv += [] if "--coordinator" in tail else ["--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert not out.exists()


@pytest.mark.parametrize(
    "tail, words",
    [
        (["--processes", "2"], "--processes 2: the run has 1 member(s)"),
        (["--seeds", "2", "--processes", "3"], "more members (--seeds K)"),
        (["--seeds", "2", "--process-id", "1"], "--process-id needs --coordinator"),
    ],
)
def test_text_process_options_refuse_bad_values_in_one_line(
    tmp_path, capsys, tail, words
):
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat. " * 20)
    out = tmp_path / "run"
    argv = ["--quiet", "text", "--corpus", str(corpus), "--out", str(out), *tail]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert not out.exists()


@pytest.mark.parametrize(
    "sweep, words",
    [
        ({"seeds": "two"}, "setting sweep.seeds must be an integer"),
        ({"lrs": [0.1, "x"]}, "setting sweep.lrs must be a list of numbers"),
        ({"lrs": [-0.1]}, "lrs: every step size must be > 0"),
        ({"chunk": 2}, "unknown settings sweep.chunk"),
        ([2], "setting sweep must be a JSON object"),
    ],
)
def test_resume_refuses_a_damaged_sweep_in_one_line(tmp_path, capsys, sweep, words):
    (tmp_path / "config.json").write_text(
        json.dumps({"command": "train", "config": {"seed": 0}, "sweep": sweep})
    )
    assert main(["--quiet", "train", "--resume", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def test_resume_refuses_new_members(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"config": {"seed": 0}}))
    assert main(["train", "--resume", str(tmp_path), "--seeds", "3"]) == 2
    assert "drop --seeds" in capsys.readouterr().err
    assert main(["train", "--resume", str(tmp_path), "--lrs", "0.1"]) == 2
    assert "drop --lrs" in capsys.readouterr().err


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_process_0_names_a_member_it_cannot_see(tmp_path):
    cfg = TrainConfig(
        steps=2,
        num_saves=2,
        segments=1,
        seq_len=6,
        batch=2,
        eval_batch=8,
        d_model=2,
        layers=1,
        heads=1,
    )
    with pytest.raises(
        FileNotFoundError,
        match="member train_s0, run by process 0 of 2: .* has no segment 0.*shares",
    ):
        gather(cfg, TrainSweep(seeds=2), tmp_path, count=2)


# -- real processes (slow): two on this machine against one --------------------------


def _gflow(*args, timeout=600):
    proc = subprocess.run(
        [sys.executable, "-m", "gflow", "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc.returncode, proc.stdout, proc.stderr


def _arrays(run_dir, names):
    """{name/array: values} of the runs' metrics files."""
    out = {}
    for name in names:
        with np.load(Path(run_dir) / f"{name}_metrics.npz") as data:
            out |= {f"{name}/{k}": data[k] for k in data.files}
    return out


def _assert_same_runs(a, b, names):
    """Every saved metric of every run bit for bit, and the same stages."""
    x, y = _arrays(a, names), _arrays(b, names)
    assert x.keys() == y.keys() and x
    for k in x:
        np.testing.assert_array_equal(x[k], y[k], err_msg=k)
    for file in ("stages.json", "stages_summary.json"):
        assert json.loads((a / file).read_text()) == json.loads((b / file).read_text())


@pytest.fixture(scope="module")
def one_train(tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "run"
    rc, _, err = _gflow(*SWEEP, "--out", str(out))
    assert rc == 0, err
    return out


@pytest.mark.slow
def test_two_processes_train_the_members_of_one(one_train, tmp_path):
    out = tmp_path / "run"
    rc, stdout, err = _gflow(*SWEEP, "--processes", "2", "--out", str(out))
    assert rc == 0, err
    assert "4 members: 2 processes" in stdout and err == ""
    _assert_same_runs(one_train, out, MEMBERS)
    run = load_run(out)
    assert run["config"]["members"] == MEMBERS
    assert run["config"]["sweep"] == {"seeds": 2, "lrs": [0.01, 0.005]}
    assert run["train_lr0.005_s1"].final.n_layers == 2
    np.testing.assert_allclose(run["train_lr0.005_s1"].t[-1], 8 * 0.005)
    assert sorted(p.name for p in (out / "checkpoint").iterdir()) == sorted(MEMBERS)
    summary = json.loads((out / "stages_summary.json").read_text())
    assert summary["seeds"] == [0, 1]
    assert set(summary["runs"]) == {"train_lr0.01", "train_lr0.005"}
    log = (out / "gflow.log").read_text()
    assert "from process 1 of 2: train_lr0.01_s1, train_lr0.005_s1" in log
    report = write_report(out).read_text()
    assert "figures/train_lr0.005_s1/head_entropy.png" in report


@pytest.mark.slow
def test_a_killed_train_worker_ends_the_run_and_it_resumes(one_train, tmp_path):
    """SIGKILL process 1 once it has saved a segment: the parent stops process 0
    and says so in one line; --resume (here in one process) reads every saved
    segment back and gives the members of an uninterrupted run."""
    out = tmp_path / "run"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gflow",
            "--quiet",
            *SWEEP,
            "--processes",
            "2",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = out / "checkpoint" / "train_lr0.01_s1" / "segment-000.npz"  # process 1's
    deadline = time.time() + 300
    while time.time() < deadline and parent.poll() is None and not first.exists():
        time.sleep(0.02)
    workers = _children(parent.pid)
    assert parent.poll() is None and set(workers) == {0, 1}
    os.kill(workers[1], signal.SIGKILL)
    _, err = parent.communicate(timeout=120)
    assert parent.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "gflow train: error: process 1 of 2 was killed by SIGKILL" in lines[0]
    assert "the segments finished so far are saved" in lines[0]
    assert f"'gflow train --resume {out} --processes 2'" in lines[0]
    assert not (out / "stages.json").exists()
    saved = first.stat().st_mtime_ns

    rc, stdout, err = _gflow("train", "--resume", str(out))
    assert rc == 0, err
    assert "segment(s) resumed" in stdout
    assert first.stat().st_mtime_ns == saved  # read back, not recomputed
    _assert_same_runs(one_train, out, MEMBERS)


def _children(pid):
    """{process id: pid} of the workers that ``pid`` started."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    found = {}
    for child in path.read_text().split() if path.exists() else []:
        argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        if b"--process-id" in argv:
            found[int(argv[argv.index(b"--process-id") + 1])] = int(child)
    return found


@pytest.mark.slow
def test_text_seeds_over_two_processes_equal_one(tmp_path):
    corpus = tmp_path / "corpus.txt"
    rng = np.random.default_rng(0)
    words = "the cat sat on the mat and a dog ran to the red house".split()
    corpus.write_text(
        " ".join(" ".join(rng.choice(words, 8)) + "." for _ in range(300))
    )
    text = [
        "text",
        "--corpus",
        str(corpus),
        "--vocab-size",
        "8",
        "--context",
        "6",
        "--windows",
        "32",
        "--steps",
        "20",
        "--adam-steps",
        "10",
        "--num-saves",
        "5",
        "--num-queries",
        "2",
        "--seeds",
        "2",
    ]
    one, two = tmp_path / "one", tmp_path / "two"
    rc, _, err = _gflow(*text, "--out", str(one))
    assert rc == 0, err
    rc, stdout, err = _gflow(*text, "--processes", "2", "--out", str(two))
    assert rc == 0, err
    assert "stage times over 2 seeds" in stdout and err == ""
    runs = ["gd_s0", "adam_s0", "gd_s1", "adam_s1"]
    _assert_same_runs(one, two, runs)
    for name in runs:  # the attention rows as well
        with (
            np.load(one / f"{name}_rows.npz") as a,
            np.load(two / f"{name}_rows.npz") as b,
        ):
            np.testing.assert_array_equal(a["rows"], b["rows"])
    assert "seeds from process 1 of 2: 1\n" in (two / "gflow.log").read_text()
    assert sorted(p.name for p in (two / "pieces").iterdir()) == sorted(
        f"{n}-000.npz" for n in runs
    )
