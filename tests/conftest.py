"""Test configuration: tests are an entry point, so they choose float64 here."""

import os
import subprocess
import sys
import time
from pathlib import Path

import jax
import jaxtyping
import pytest

from gflow import AttentionModel, MarkovChain, PopulationLoss

jax.config.update("jax_enable_x64", True)
# tests import the experiment scripts by name (`from experiments import
# markov_cycle`): the repository root on sys.path, also under a bare `pytest`
# (whose rootdir puts only tests/ there)
if (_root := str(Path(__file__).resolve().parents[1])) not in sys.path:
    sys.path.insert(0, _root)
# `python -m gflow` processes started by tests: no persistent compilation cache
os.environ.setdefault("GFLOW_COMPILE_CACHE", "0")


def pytest_configure(config):
    _one_worker_per_module(config)
    _fewer_optimisation_passes(config)


def _one_worker_per_module(config):
    """``-n 2`` without ``--dist``: each test module on one worker (xdist's
    ``loadscope``) instead of xdist's default ``load``, which deals tests out one
    by one, so that a module's fixtures and the XLA programs its tests share are
    built once, not on both workers. On a subset of five modules with shared
    fixtures (test_monitor, test_invariants, test_monitor_core,
    test_flow_diagnostics, test_diagnostics) it took 90 s against 103 s, the two
    runs back to back at the same load (about 5). An explicit ``--dist`` wins."""
    if getattr(config.option, "dist", None) != "load":
        return
    if any(
        a == "--dist" or a.startswith("--dist=") for a in config.invocation_params.args
    ):
        return
    config.option.dist = "loadscope"


def _fewer_optimisation_passes(config):
    """The default run (``-m 'not slow'``) compiles XLA programs without most of
    XLA's optimisation passes, in this process and the ``python -m gflow``
    processes it starts.

    Its tests are small programs run once or a few times, so compiling is most of
    their time: the default suite took 183.6 s with the passes and 132.2 s
    without (2 cores, 2026-12-06, load 0.2-0.3 at the start; docs/testing.md). The
    programs compute the same values (every tolerance holds either way). The
    slow runs, whose flows run thousands of steps, keep XLA's defaults, and so
    does a run that sets JAX_DISABLE_MOST_OPTIMIZATIONS itself.
    """
    user_set = "JAX_DISABLE_MOST_OPTIMIZATIONS" in os.environ
    if user_set or config.option.markexpr.replace(" ", "") != "notslow":
        return
    os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"
    jax.config.update("jax_disable_most_optimizations", True)


@pytest.fixture(autouse=True)
def _float64_everywhere():
    """CLI handlers called in-process choose their own precision (`gflow text` runs
    GD in float32): give every test float64 back afterwards."""
    yield
    jax.config.update("jax_enable_x64", True)


@pytest.fixture
def unchecked():
    """jaxtyping's run-time checks off for one test (pyproject.toml turns them on).

    For tests of gflow's own argument checks: they pass arguments that break the
    annotations on purpose, to reach the ValueError that every caller without the
    checks gets.
    """
    before = jaxtyping.config.jaxtyping_disable
    jaxtyping.config.update("jaxtyping_disable", True)
    yield
    jaxtyping.config.update("jaxtyping_disable", before)


@pytest.fixture
def key():
    return jax.random.key(0)


@pytest.fixture(scope="module")
def setup():
    """(loss_fn, model): a small 3-token chain and model whose flow moves quickly."""
    chain = MarkovChain.from_lambda(pi=(0.6, 0.3, 0.1), lam=0.5)
    model = AttentionModel.init(
        d_vocab=3, d_model=3, init_scale=0.3, key=jax.random.key(1)
    )
    return PopulationLoss(chain), model


class GflowProcess:
    """Real ``python -m gflow`` processes, for the kill-and-resume tests."""

    @staticmethod
    def start(*args):
        return subprocess.Popen(
            [sys.executable, "-m", "gflow", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    @classmethod
    def run(cls, *args, timeout=900) -> str:
        """Run to the end; assert success; return stdout."""
        proc = cls.start(*args)
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err
        return out

    @classmethod
    def interrupt(cls, args, ready, sig, timeout=600):
        """Start, send ``sig`` once ``ready()`` holds; return (exit status, stderr)."""
        proc = cls.start(*args)
        deadline = time.time() + timeout
        while time.time() < deadline and proc.poll() is None and not ready():
            time.sleep(0.05)
        assert proc.poll() is None, "the run finished before it could be interrupted"
        os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=120)
        return proc.returncode, err


@pytest.fixture(scope="session")
def gflow_process():
    return GflowProcess
