"""The ``gflow`` command's persistent compilation cache (issue 12, point 3).

The folder and the switches are checked in process with JAX's settings recorded, not
changed; the real thing (a ``gflow flow`` process writes its solve into the folder,
the next one reads it back; the option and the variable leave no folder) runs in
fresh processes. The statuses are checked again with Equinox's error checks turned
into NaN, as the command turns them when the cache is on.
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import equinox
import jax
import numpy as np
import pytest

from gflow.cli import build_parser, cache_dir, configure

ROOT = Path(__file__).resolve().parent.parent
TINY = [
    "flow",
    "--t1",
    "1",
    "--num-saves",
    "2",
    "--segments",
    "1",
    "--no-params",
    "--d-model",
    "2",
]


@pytest.mark.parametrize(
    "environ, expected",
    [
        ({"XDG_CACHE_HOME": "/xdg"}, f"/xdg/gflow/jax-{socket.gethostname()}"),
        ({"XDG_CACHE_HOME": "/xdg", "GFLOW_COMPILE_CACHE": "1"}, "/xdg/gflow/jax-"),
        ({"GFLOW_COMPILE_CACHE": "/some/dir"}, "/some/dir"),
        ({"GFLOW_COMPILE_CACHE": "0"}, None),
        ({"GFLOW_COMPILE_CACHE": "off", "XDG_CACHE_HOME": "/xdg"}, None),
        ({"GFLOW_COMPILE_CACHE": " OFF "}, None),
    ],
)
def test_the_folder_is_per_user_and_host_unless_chosen_or_off(environ, expected):
    folder = cache_dir(environ)
    if expected is None:
        assert folder is None
    else:
        assert str(folder).startswith(expected)


def test_the_default_folder_without_xdg_is_under_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    folder = cache_dir({})
    assert folder == tmp_path / ".cache" / "gflow" / f"jax-{socket.gethostname()}"


@pytest.fixture
def recorded(monkeypatch):
    """configure() as the entry point runs it, with JAX's settings recorded and the
    environment and Equinox's switch restored afterwards."""
    calls = {}
    monkeypatch.setattr(jax.config, "update", lambda k, v: calls.__setitem__(k, v))
    monkeypatch.delenv("EQX_ON_ERROR", raising=False)
    monkeypatch.delenv("GFLOW_COMPILE_CACHE", raising=False)
    monkeypatch.setattr(equinox._errors, "EQX_ON_ERROR", "raise")
    monkeypatch.setattr(equinox._config, "EQX_ON_ERROR", "raise")
    return calls


def test_configure_turns_the_cache_on_in_the_chosen_folder(
    recorded, monkeypatch, tmp_path
):
    monkeypatch.setenv("GFLOW_COMPILE_CACHE", str(tmp_path / "c"))
    assert configure() == tmp_path / "c"
    assert recorded == {
        "jax_compilation_cache_dir": str(tmp_path / "c"),
        "jax_persistent_cache_min_compile_time_secs": 0.0,
    }
    # Equinox's checks become NaN (no host callbacks), here and in child processes
    assert equinox._errors.EQX_ON_ERROR == "nan"
    assert os.environ["EQX_ON_ERROR"] == "nan"


def test_configure_keeps_the_users_equinox_setting(recorded, monkeypatch, tmp_path):
    monkeypatch.setenv("GFLOW_COMPILE_CACHE", str(tmp_path))
    monkeypatch.setenv("EQX_ON_ERROR", "raise")
    configure()
    assert equinox._errors.EQX_ON_ERROR == "raise"
    assert os.environ["EQX_ON_ERROR"] == "raise"


def test_the_option_and_the_variable_turn_it_off(recorded, monkeypatch, tmp_path):
    monkeypatch.setenv("GFLOW_COMPILE_CACHE", str(tmp_path))
    assert configure(no_cache=True) is None
    assert os.environ["GFLOW_COMPILE_CACHE"] == "0"  # for the processes it starts
    monkeypatch.setenv("GFLOW_COMPILE_CACHE", "0")
    assert configure() is None
    assert recorded == {}  # JAX untouched: no cache
    assert equinox._errors.EQX_ON_ERROR == "raise" and "EQX_ON_ERROR" not in os.environ


def test_the_global_option_parses_before_the_command():
    args = build_parser().parse_args(["--no-compile-cache", *TINY])
    assert args.no_compile_cache and args.command == "flow"
    assert not build_parser().parse_args(TINY).no_compile_cache


def _gflow(*argv, cache, **env):
    """``python -m gflow --quiet ARGV`` in a fresh process; (stdout, stderr)."""
    environ = {k: v for k, v in os.environ.items() if k != "EQX_ON_ERROR"}
    environ.update(GFLOW_COMPILE_CACHE=str(cache), JAX_LOG_COMPILES="1", **env)
    proc = subprocess.run(
        [sys.executable, "-m", "gflow", "--quiet", *argv],
        capture_output=True,
        text=True,
        env=environ,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, proc.stderr


@pytest.mark.slow  # four fresh processes, ~6 s each on 2 cores
def test_a_flow_writes_its_solve_and_the_next_one_reads_it(tmp_path):
    cache = tmp_path / "cache"
    _, err = _gflow(*TINY, "--out", str(tmp_path / "a"), cache=cache)
    assert "Finished tracing _solve_arrays" in err
    name = "jit__solve_arrays-"
    solves = [p.name for p in cache.iterdir() if p.name.startswith(name)]
    assert len(solves) == 1, sorted(p.name for p in cache.iterdir())
    # the traced program too (gflow.runs.program_cache), so the next run skips tracing
    programs = sorted(p.name for p in (cache / "programs").iterdir())
    assert len(programs) == 1 and programs[0].startswith("_solve_arrays-"), programs
    out, err = _gflow(*TINY, "--no-figures", "--out", str(tmp_path / "b"), cache=cache)
    assert "flow success" in out
    assert list((tmp_path / "a").glob("*.png")) and not list(
        (tmp_path / "b").glob("*.png")
    )
    assert "Persistent compilation cache hit for 'jit__solve_arrays'" in err
    # the first run traced and wrote the program, the second read it back
    assert "program cache: wrote" in (tmp_path / "a" / "gflow.log").read_text()
    assert "program cache: read" in (tmp_path / "b" / "gflow.log").read_text()
    assert sorted(p.name for p in (cache / "programs").iterdir()) == programs
    a, b = (np.load(tmp_path / d / "flow_metrics.npz") for d in "ab")
    assert all(np.array_equal(a[k], b[k]) for k in a.files)  # the same program
    # off: by the option, by the variable; the folder is never made
    _gflow("--no-compile-cache", *TINY, "--out", str(tmp_path / "c"), cache=cache / "x")
    _gflow(*TINY, "--out", str(tmp_path / "d"), cache="0")
    assert not (cache / "x").exists()


_STATUSES = r"""
import os, sys
import gflow, equinox, pytest
from gflow.cli.compile_cache import _errors_as_nan
_errors_as_nan()  # as the entry point does, after `import gflow`
assert equinox._errors.EQX_ON_ERROR == "nan"
# the solve's program has no host callback left (the progress bar aside)
import diffrax, jax, numpy as np
from gflow.dynamics.flow import _solve
model = gflow.AttentionModel.init(d_vocab=3, d_model=2, init_scale=0.3,
                                  key=jax.random.key(0))
params, static = equinox.partition(model, equinox.is_inexact_array)
loss = gflow.PopulationLoss(gflow.MarkovChain.from_lambda(pi=(0.6, 0.3, 0.1), lam=0.5))
f = jax.numpy.float64
text = _solve.lower(params, static, loss, None, diffrax.Tsit5(),
    diffrax.PIDController(rtol=f(1e-6), atol=f(1e-8)), np.linspace(0, 1, 3),
    f(0), f(1), None, 100, False, diffrax.NoProgressMeter()).as_text()
assert "callback" not in text, "host callbacks left in the solve"
# jaxtyping's import hook cannot wrap gflow, imported above: its options are dropped
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-o", "addopts=", *sys.argv[1:]]))
"""


@pytest.mark.slow  # a fresh process that runs the status tests again
def test_statuses_hold_with_equinox_errors_as_nan():
    """max_steps, diverged (NaN) and failed, with the switch the cache needs on."""
    tests = [
        "tests/test_flow.py::" + name
        for name in (
            "test_max_steps_keeps_partial_trajectory",
            "test_blow_up_is_reported_not_raised",
            "test_statuses_for_a_failed_and_a_non_finite_solve",
            "test_evaluations_of_a_solve_whose_only_step_was_rejected",
        )
    ]
    environ = {k: v for k, v in os.environ.items() if k != "EQX_ON_ERROR"}
    environ["JAX_ENABLE_X64"] = "1"
    proc = subprocess.run(
        [sys.executable, "-c", _STATUSES, *tests],
        capture_output=True,
        text=True,
        env=environ,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "4 passed" in proc.stdout
