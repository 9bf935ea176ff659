"""Sweeps over several processes (issue 17): the chunk plan, the options' checks, and
real runs of two processes joined by jax.distributed on this machine (slow)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import optax
import pytest

from gflow.cli import build_parser, free_port, main
from gflow.runs import Processes, assign, chunk_path, run_sweep_resumable

LRS = [0.2, 0.1, 0.05, 0.04, 0.02]


# -- the plan: which process runs which chunk ---------------------------------------


def test_assign_is_longest_processing_time_first():
    # chunk costs t1 / min η of the default sweep at --chunk 1: 150 ... 1200 steps
    assert assign([150, 300, 600, 1200], 2) == [1, 1, 1, 0]  # loads 1200 and 1050
    assert assign([150, 300, 600, 1200], 1) == [0, 0, 0, 0]
    assert assign([150, 300, 600, 1200], 4) == [3, 2, 1, 0]
    assert assign([5.0, 5.0, 5.0], 2) == [0, 1, 0]  # ties: the lowest index first
    # LPT's worst case on 2 processes: 7 against the best 6 ({3, 3}, {2, 2, 2}),
    # within its bound 4/3 - 1/(3P) = 7/6
    costs = [3, 3, 2, 2, 2]
    loads = np.bincount(assign(costs, 2), weights=costs, minlength=2)
    assert loads.max() == 7


def test_processes_validate_themselves():
    assert Processes().main and Processes(1, 2).count == 2 and not Processes(1, 2).main
    with pytest.raises(ValueError, match="index: must lie in 0 .. 1"):
        Processes(2, 2)
    with pytest.raises(ValueError, match="count: need at least 1"):
        Processes(0, 0)


@pytest.fixture(scope="module")
def sgd_setup(setup):
    return (*setup, optax.inject_hyperparams(optax.sgd)(learning_rate=0.1))


def test_two_processes_split_the_chunks_and_process_0_gathers_them(
    sgd_setup, tmp_path, monkeypatch
):
    """Both processes' parts in turn, in this process (the one collective, the sum of
    read-back chunks, stubbed): each saves only its own chunks, process 1 returns
    None, and process 0 reads process 1's chunks from the shared directory; the
    members are bit for bit those of one process."""
    loss, model, opt = sgd_setup
    kw = dict(t1=1.0, num_saves=5, fingerprint="cfg", chunk=2)
    one = run_sweep_resumable(
        loss, model, opt, LRS, checkpoint_dir=tmp_path / "a", **kw
    )
    monkeypatch.setattr(
        "gflow.runs.resumable_sweep.total", lambda count, processes: count
    )
    shared = tmp_path / "b"
    # costs t1 / min η: chunk 0 = 10, 1 = 25, 2 = 50 steps -> process 0 runs chunk 2
    assert assign([10, 25, 50], 2) == [1, 1, 0]
    two = Processes(1, 2)
    assert (
        run_sweep_resumable(
            loss, model, opt, LRS, checkpoint_dir=shared, processes=two, **kw
        )
        is None
    )
    assert [chunk_path(shared, i).exists() for i in range(3)] == [1, 1, 0]
    run = run_sweep_resumable(
        loss, model, opt, LRS, checkpoint_dir=shared, processes=Processes(0, 2), **kw
    )
    assert run.info["processes"] == 2 and run.info["chunk"] == 2
    for f in ("lrs", "t", "steps", "loss", "diverged_step", "first_rise_step"):
        np.testing.assert_array_equal(getattr(run, f), getattr(one, f))
    np.testing.assert_array_equal(run.params.W_Q, one.params.W_Q)


def test_process_0_names_a_chunk_it_cannot_see(sgd_setup, tmp_path, monkeypatch):
    loss, model, opt = sgd_setup
    monkeypatch.setattr(
        "gflow.runs.resumable_sweep.total", lambda count, processes: count
    )
    with pytest.raises(FileNotFoundError, match="chunk 0, run by process 1.*shares"):
        run_sweep_resumable(
            loss,
            model,
            opt,
            LRS,
            t1=1.0,
            num_saves=5,
            fingerprint="cfg",
            chunk=2,
            checkpoint_dir=tmp_path,
            processes=Processes(0, 2),
        )


def test_workers_start_from_the_configuration_on_disk(tmp_path):
    """--processes writes config.json first; each worker reads the configuration
    back from it, exactly (floats that only repr keeps included)."""
    from gflow.runs import FlowConfig, RunDirectory, SweepConfig

    flow = FlowConfig(init_scale=0.1 + 0.2, seed=7)  # a float that repr must keep
    for cfg in (
        SweepConfig(lrs=(0.4, 1 / 3), t1=7.5, chunk=1, flow=flow),
        SweepConfig(
            optimizer="momentum",
            beta=0.3,
            sharded=False,
            threshold=0.2,
            num_saves=11,
            reference="flow",
        ),
        SweepConfig(reference="modified", lrs=(0.1, 0.05, 0.02)),
    ):
        run = RunDirectory(tmp_path / f"run-{cfg.fingerprint()}")
        run.write_config("sweep", cfg, environment=None)
        assert run.read_config(SweepConfig, "sweep", "--resume") == cfg


def test_the_chunk_shrinks_so_that_every_process_has_one():
    from gflow.cli import resolve
    from gflow.runs import SweepJob

    job = SweepJob()

    def chunk(*argv, processes=1):
        request = resolve(job, build_parser().parse_args(["sweep", *argv]))
        return job.for_processes(request.cfg, processes, request.chosen).chunk

    assert chunk() == 4  # one process: the default, as before
    assert chunk("--lrs", "0.4,0.2", processes=1) == 4
    assert chunk(processes=2) == 2 and chunk(processes=4) == 1
    assert chunk("--lrs", "0.4,0.2,0.1", processes=2) == 2
    assert chunk("--chunk", "3", processes=2) == 3  # given: kept


# -- every new option refuses bad values in one line, before anything runs ----------

BASE = ["--quiet", "sweep", "--lrs", "0.4,0.2", "--t1", "1", "--num-saves", "2"]


@pytest.mark.parametrize(
    "tail, words",
    [
        (["--processes", "0"], "--processes: need at least 1"),
        (["--processes", "x"], "--processes: expected an integer"),
        (["--processes", "3"], "--processes 3: the 2 step sizes make 2 chunk(s)"),
        (["--processes", "2", "--chunk", "2"], "the 2 step sizes make 1 chunk(s)"),
        (["--processes", "2", "--process-id", "0"], "drop --process-id"),
        (["--coordinator", "localhost"], "--coordinator: expected HOST:PORT"),
        (["--coordinator", ":1234"], "--coordinator: expected HOST:PORT"),
        (["--coordinator", "localhost:0"], "--coordinator: expected a port"),
        (["--coordinator", "localhost:99999"], "--coordinator: expected a port"),
        (["--coordinator", "localhost:12a"], "--coordinator: expected a port"),
        (["--coordinator", "localhost:1234"], "needs --num-processes N and"),
        (["--num-processes", "2"], "--num-processes needs --coordinator HOST:PORT"),
        (["--process-id", "1"], "--process-id needs --coordinator HOST:PORT"),
        (["--num-processes", "0"], "--num-processes: need at least 1"),
        (["--process-id", "-1"], "--process-id: must be >= 0"),
        (
            ["--coordinator", "h:1", "--num-processes", "2", "--process-id", "2"],
            "--process-id: must lie in 0 .. 1",
        ),
        (["--coordinator", "auto", "--num-processes", "2"], "drop --num-processes"),
        (["--join-timeout", "0", "--processes", "2"], "--join-timeout: must be > 0"),
        (["--join-timeout", "nan", "--processes", "2"], "--join-timeout: must be > 0"),
        (["--join-timeout", "5"], "--join-timeout applies only with --processes"),
    ],
)
def test_process_options_refuse_bad_values_in_one_line(tmp_path, capsys, tail, words):
    out = tmp_path / "run"
    assert main([*BASE, "--out", str(out), *tail]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert not out.exists()


def test_a_resumed_run_keeps_its_chunks(tmp_path, capsys):
    from gflow.runs import RunDirectory, SweepConfig, environment

    # 4 step sizes in one chunk of 4, a run that has started
    RunDirectory(tmp_path).write_config("sweep", SweepConfig(), environment())
    assert main(["sweep", "--resume", str(tmp_path), "--processes", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--processes 2: the 4 step sizes make 1 chunk" in err[0]
    assert "give at most 1 process(es) (a resumed run keeps its chunks)" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def test_a_cluster_process_needs_a_shared_out(capsys):
    argv = ["--coordinator", "h:1", "--num-processes", "2", "--process-id", "1"]
    assert main([*BASE, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--coordinator: give --out DIR" in err[0]


# -- real processes (slow): two on this machine against one --------------------------

SWEEP = ["sweep", "--optimizer", "sgd", "--lrs", "0.4,0.2,0.1,0.05", "--t1", "60"]


def _gflow(*args, timeout=600):
    proc = subprocess.run(
        [sys.executable, "-m", "gflow", "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc.returncode, proc.stdout, proc.stderr


def _members(run_dir):
    return json.loads((Path(run_dir) / "sweep.json").read_text())["members"]


def _assert_same_members(a, b):
    """Member for member, every number equal to 1e-10 relative (in practice: equal)."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            if isinstance(x[k], float) and isinstance(y[k], float):
                assert y[k] == pytest.approx(x[k], rel=1e-10, abs=1e-300), k
            else:
                assert x[k] == y[k], k


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "run"
    rc, _, err = _gflow(*SWEEP, "--out", str(out))
    assert rc == 0, err
    return out


@pytest.mark.slow
def test_two_processes_give_the_members_of_one(one_process, tmp_path):
    """Issue 17's done-when: --processes 2 gives the same sweep.json members."""
    out = tmp_path / "run"
    rc, stdout, err = _gflow(*SWEEP, "--processes", "2", "--out", str(out))
    assert rc == 0, err
    assert "2 processes" in stdout and "[Gloo]" not in stdout
    assert err == ""
    _assert_same_members(_members(one_process), _members(out))
    two = json.loads((out / "sweep.json").read_text())
    assert two["processes"] == 2
    assert json.loads((out / "config.json").read_text())["config"]["chunk"] == 2
    # one run directory, written by process 0; each chunk saved by its process
    assert sorted(p.name for p in (out / "checkpoint").iterdir()) == [
        "members-000.npz",
        "members-001.npz",
    ]
    assert "from process 1" in (out / "gflow.log").read_text()


@pytest.mark.slow
def test_the_cluster_form_on_one_machine(one_process, tmp_path):
    """Two processes started by hand with --coordinator, as on two hosts."""
    out, port = tmp_path / "run", free_port()
    cluster = [
        "--coordinator",
        f"localhost:{port}",
        "--num-processes",
        "2",
        "--chunk",
        "2",
        "--out",
        str(out),
    ]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gflow",
                "--quiet",
                *SWEEP,
                *cluster,
                "--process-id",
                str(i),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in (1, 0)  # the order of starting does not matter
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "2 processes" in outs[1][0]  # process 0 prints the summary
    _assert_same_members(_members(one_process), _members(out))


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
def test_a_killed_worker_ends_the_run_and_it_resumes(tmp_path):
    """SIGKILL process 1 once it has saved a chunk: the parent stops process 0 and
    says so in one line; --resume reads the saved chunks back and gives the members
    of an uninterrupted run."""
    args = [*SWEEP[:4], "0.4,0.2,0.1,0.05,0.02", "--t1", "60", "--chunk", "1"]
    # chunks cost 150 ... 3000 steps: process 0 runs chunk 4, process 1 chunks 0-3
    out = tmp_path / "run"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gflow",
            "--quiet",
            *args,
            "--processes",
            "2",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = chunk_path(out / "checkpoint", 0)
    deadline = time.time() + 300
    while time.time() < deadline and parent.poll() is None and not first.exists():
        time.sleep(0.02)
    workers = _children(parent.pid)
    assert parent.poll() is None and set(workers) == {0, 1}
    os.kill(workers[1], signal.SIGKILL)
    killed = time.time()
    _, err = parent.communicate(timeout=120)
    assert time.time() - killed < 30  # ended, not hung
    assert parent.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "process 1 of 2 was killed by SIGKILL" in lines[0]
    assert f"--resume {out} --processes 2" in lines[0]
    assert not (out / "sweep.json").exists()
    for pid in workers.values():  # no worker outlives the run
        assert (
            not Path(f"/proc/{pid}").exists()
            or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
        )
    saved = first.stat().st_mtime_ns

    rc, stdout, err = _gflow("sweep", "--resume", str(out), "--processes", "2")
    assert rc == 0, err
    assert "chunk(s) resumed" in stdout
    assert first.stat().st_mtime_ns == saved  # read back, not recomputed
    whole = tmp_path / "whole"
    rc, _, err = _gflow(*args, "--out", str(whole))
    assert rc == 0, err
    _assert_same_members(_members(whole), _members(out))


@pytest.mark.slow
@pytest.mark.parametrize(
    "coordinator, process_id, words",
    [
        ("nosuch-host.invalid:{port}", "1", "cannot resolve nosuch-host.invalid"),
        ("127.0.0.1:{port}", "1", "did not all join within 3 s (this is process 1)"),
        ("127.0.0.1:{busy}", "0", "process 0 cannot listen on port"),
    ],
)
def test_a_bad_coordinator_fails_in_seconds_in_one_line(
    tmp_path, coordinator, process_id, words
):
    import socket

    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        address = coordinator.format(port=free_port(), busy=busy.getsockname()[1])
        start = time.time()
        rc, stdout, err = _gflow(
            *SWEEP,
            "--coordinator",
            address,
            "--num-processes",
            "2",
            "--process-id",
            process_id,
            "--join-timeout",
            "3",
            "--out",
            str(tmp_path / "run"),
            timeout=60,
        )
    assert time.time() - start < 20
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err
    assert lines[0].startswith("gflow sweep: error: --coordinator") and words in err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_processes_with_other_settings_stop_together_in_one_line(tmp_path):
    """Process 1 started with another --t1 (or not seeing process 0's directory):
    both processes stop before any member runs, each with the same one line."""
    out, port = tmp_path / "run", free_port()
    cluster = [
        "--coordinator",
        f"localhost:{port}",
        "--num-processes",
        "2",
        "--out",
        str(out),
        "--join-timeout",
        "60",
    ]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gflow",
                "--quiet",
                *SWEEP[:-1],
                t1,
                *cluster,
                "--process-id",
                str(i),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, t1 in ((0, "60"), (1, "30"))
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [2, 2], outs
    for _, err in outs:
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert "process(es) 1 of 2 do not see" in lines[0]
        assert "same settings" in lines[0]
    assert not (out / "checkpoint").exists()


@pytest.mark.slow
def test_workers_do_not_outlive_a_killed_parent(tmp_path):
    """SIGKILL the parent once the workers have joined and one waits for the other
    (process 1's chunk is saved, process 0 still runs its own): both die at once."""
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
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    first = chunk_path(out / "checkpoint", 0)  # process 1's (process 0 runs chunk 1)
    deadline = time.time() + 300
    while time.time() < deadline and parent.poll() is None and not first.exists():
        time.sleep(0.02)
    workers = _children(parent.pid)
    assert set(workers) == {0, 1}
    parent.kill()
    parent.wait()
    deadline = time.time() + 5
    alive = list(workers.values())
    while alive and time.time() < deadline:
        alive = [pid for pid in alive if _running(pid)]
        time.sleep(0.1)
    assert not alive, "workers outlived their parent"


def _running(pid):
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
