"""Interrupts inside compiled work (issue 33 point 2): ``SignalWatch`` notes a
signal while the main thread waits in XLA, and ``solve_flow(interrupt=...)`` ends
its compiled solve when asked, raising ``KeyboardInterrupt``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import diffrax
import equinox as eqx
import jax
import jax.flatten_util
import numpy as np
import pytest

import gflow
from gflow.dynamics import (
    FlatGradientField,
    GradientField,
    SignalWatch,
    abandoned,
    call_interruptibly,
)
from gflow.problems import AttentionModel, MarkovChain, PopulationLoss


def _flow_problem():
    chain = MarkovChain.default()
    model = AttentionModel.init(d_vocab=4, d_model=4, key=jax.random.key(0))
    return PopulationLoss(chain), model


class _Asked:
    """One interrupt object for the Tsit5 solves below: the object is part of the
    compiled solve (its host callback), so with one object and the same settings
    they share one program; each test sets whom it asks."""

    def __init__(self):
        self.ask = None

    def __call__(self):
        return self.ask()


ASKED = _Asked()
#: the settings of those solves (t1 and the saves' times are traced)
WATCHED = dict(solver=diffrax.Tsit5(), interrupt=ASKED, progress=False)


def test_the_watch_notes_a_signal_and_restores_the_wakeup_fd():
    # whatever an earlier test or library left: Python's own SIGINT handler, and
    # the wakeup fd that was set before (an event loop may have set one)
    old_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    before = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(before)
    try:
        with SignalWatch() as watch:
            assert not watch.pending()
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)  # the handler raises here, long before 5 s
            assert watch.pending() and watch()  # and stays true
        assert signal.set_wakeup_fd(before) == before  # the old fd is back
    finally:
        signal.signal(signal.SIGINT, old_handler)
    assert not SignalWatch().pending()  # a watch never entered sees nothing


def test_the_watch_refuses_another_thread():
    errors = []

    def enter():
        try:
            SignalWatch().__enter__()
        except RuntimeError as e:
            errors.append(e)

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    assert errors and "main thread" in str(errors[0])


def test_a_solve_ends_where_its_interrupt_turns_true():
    """Oracle: the interrupt is asked every 32 attempted steps; true from its 4th
    call on, the solve of a horizon that needs thousands of steps ends after the
    4th call (one more call per rejected step at most), raising. One interrupt
    object for both solves, so the solve compiles once."""
    loss, model = _flow_problem()

    class Counting:
        def __init__(self):
            self.calls, self.limit = 0, 4

        def __call__(self):
            self.calls += 1
            return self.calls >= self.limit

    interrupt = Counting()
    ASKED.ask = interrupt
    with pytest.raises(KeyboardInterrupt, match="inside the solve"):
        gflow.solve_flow(loss, model, t1=3000.0, **WATCHED)
    assert 4 <= interrupt.calls <= 8
    # never true: a short solve runs to its end and asks all along
    interrupt.calls, interrupt.limit = 0, 10**9
    traj = gflow.solve_flow(loss, model, t1=30.0, **WATCHED)
    assert traj.status == "success" and interrupt.calls >= 2
    with pytest.raises(ValueError, match="check_every"):
        gflow.dynamics.solvers.Watched(
            diffrax.Tsit5(), 0.0, 1.0, interrupt=interrupt, check_every=0
        )


@pytest.mark.slow
def test_ctrl_c_ends_a_long_compiled_solve_within_seconds():
    """A real SIGINT while the main thread waits in the compiled solve (compiled
    beforehand): without the watch the solve runs on for minutes (measured: 155 s
    for this horizon); with it, it ends within seconds of the signal."""
    loss, model = _flow_problem()
    kw = dict(solver=diffrax.Tsit5(), max_steps=10**8, progress=False)
    with SignalWatch() as watch:
        gflow.solve_flow(loss, model, t1=1.0, interrupt=watch, **kw)  # compiled
        timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
        start = time.perf_counter()
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            gflow.solve_flow(loss, model, t1=3e4, interrupt=watch, **kw)
        assert time.perf_counter() - start < 10.0


@pytest.mark.slow
def test_gflow_flow_interrupted_in_one_long_segment_resumes(tmp_path):
    """``gflow flow --segments 1`` with a horizon of hours: SIGINT ends it with exit
    130 within seconds, and the run directory is still the run's. Tsit5: since
    the default races RKC2 against EXPRB32 (725d1f7) it reaches t = 1e6 in about
    14 s, before the signal."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "gflow", "--no-compile-cache", "flow"]
    cmd += ["--t1", "1e6", "--segments", "1", "--d-model", "4", "--solver", "tsit5"]
    cmd += ["--out", str(out)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    time.sleep(20)  # past the compilation, into the solve
    sent = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert time.perf_counter() - sent < 15
    assert "interrupted" in err
    assert (out / "config.json").is_file()


def test_call_interruptibly_ends_the_wait_and_abandons_the_call():
    """Oracle: a call that would block for 30 s, with an interrupt true from its
    3rd question on, raises KeyboardInterrupt after about 3 polls (0.3 s) and is
    left running in ``abandoned()``; without a signal the result and the errors
    of the call come back as they are."""
    release = threading.Event()

    class Counting:
        calls = 0

        def __call__(self):
            self.calls += 1
            return self.calls >= 3

    interrupt = Counting()
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt, match="compiled work"):
        call_interruptibly(release.wait, 30.0, interrupt=interrupt)
    assert time.perf_counter() - start < 5.0 and interrupt.calls == 3
    assert abandoned() == 1
    release.set()
    deadline = time.time() + 10
    while abandoned() and time.time() < deadline:
        time.sleep(0.01)
    assert abandoned() == 0

    never = lambda: False  # noqa: E731
    assert call_interruptibly(divmod, 7, 2, interrupt=never) == (3, 1)
    assert call_interruptibly(divmod, 7, 2, interrupt=None) == (3, 1)
    with pytest.raises(ZeroDivisionError):
        call_interruptibly(divmod, 7, 0, interrupt=never)


@pytest.mark.slow
def test_a_batch_flow_with_its_program_kept_on_disk_ends_within_seconds(tmp_path):
    """``gflow flow`` without a terminal, with the compile cache on: its solve runs
    from a program kept on disk, which holds no signal watch. SIGINT once the
    solve has begun (the program written, plus 5 s) ends it with exit 130 within
    seconds, leaving the run directory; before, it ran on to the end of its one
    segment (hours for this horizon)."""
    out, cache = tmp_path / "run", tmp_path / "cache"
    cmd = [sys.executable, "-m", "gflow", "flow", "--t1", "1e6", "--segments", "1"]
    cmd += ["--d-model", "4", "--solver", "tsit5", "--no-params", "--out", str(out)]
    env = {**os.environ, "GFLOW_COMPILE_CACHE": str(cache)}
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 300
    while not list(cache.glob("programs/*.jaxexport")) and time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.2)
    time.sleep(5)  # compiled and solving
    assert proc.poll() is None
    sent = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert time.perf_counter() - sent < 15
    assert "interrupted" in err and "Traceback" not in err
    assert (out / "config.json").is_file()
    assert not list((out / "checkpoint").glob("segment-*"))


@pytest.mark.slow
def test_gflow_sweep_interrupted_inside_a_chunk_resumes(tmp_path, gflow_process):
    """``gflow sweep`` in chunks of one member: the first (η = 0.1, 600 steps) is
    saved at once, the second (η = 4e-5, 1.5 million steps) runs for tens of
    seconds. SIGINT 3 s into it ends the sweep with exit 130 within seconds
    (before, it waited for the chunk); the first chunk stays as it was, the
    second is not saved, and ``--resume`` reads the first back and computes the
    second."""
    out = tmp_path / "run"
    args = ["--quiet", "sweep", "--optimizer", "sgd", "--lrs", "0.1,4e-5"]
    args += ["--t1", "60", "--chunk", "1", "--no-shard", "--no-figures"]
    first = out / "checkpoint" / "members-000.npz"
    proc = gflow_process.start(*args, "--out", str(out))
    deadline = time.time() + 300
    while not first.exists() and time.time() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.05)
    time.sleep(3)  # inside the second chunk's compiled loops
    assert proc.poll() is None, "the sweep ended before it could be interrupted"
    sent = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert time.perf_counter() - sent < 5
    assert "interrupted" in err and "Traceback" not in err
    assert not (out / "checkpoint" / "members-001.npz").exists()
    saved = first.stat().st_mtime_ns

    stdout = gflow_process.run("--quiet", "sweep", "--resume", str(out))
    assert "chunk(s) resumed" in stdout
    assert first.stat().st_mtime_ns == saved  # read back, not recomputed
    assert (out / "checkpoint" / "members-001.npz").exists()
    assert (out / "sweep.json").is_file()


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_an_implicit_solve_is_watched_and_ends_where_its_interrupt_turns_true():
    """Implicit solvers are watched like explicit ones (their root finder's
    tolerances filled from the step-size controller, as Diffrax fills them):
    ImplicitEuler over a horizon of thousands of steps, with an interrupt true from
    its 4th call on, ends after the 4th call (before, it was never asked)."""
    loss, model = _flow_problem()

    class Counting:
        calls = 0

        def __call__(self):
            self.calls += 1
            return self.calls >= 4

    interrupt = Counting()
    with pytest.raises(KeyboardInterrupt, match="inside the solve"):
        gflow.solve_flow(
            loss,
            model,
            t1=3000.0,
            ts=[0.0, 3000.0],
            solver=diffrax.ImplicitEuler(),
            interrupt=interrupt,
            progress=False,
        )
    assert 4 <= interrupt.calls <= 8


def test_an_implicit_solver_gets_the_controllers_tolerances_as_diffrax_gives_them():
    """``with_stepsize_tolerances`` fills what an implicit solver leaves to the
    step-size controller, and only that; ``Watched`` refuses a solver with some
    still unset (Diffrax would not fill them inside it)."""
    from gflow.dynamics.solvers import (
        unset_tolerances,
        with_stepsize_tolerances,
    )

    pid = diffrax.PIDController(rtol=1e-5, atol=1e-7)
    kvaerno = diffrax.Kvaerno5()
    assert unset_tolerances(kvaerno) == ("rtol", "atol", "norm")
    filled = with_stepsize_tolerances(kvaerno, pid)
    assert unset_tolerances(filled) == ()
    finder = filled.root_finder
    assert (finder.rtol, finder.atol, finder.norm) == (1e-5, 1e-7, pid.norm)
    assert with_stepsize_tolerances(filled, pid) is filled
    tsit5 = diffrax.Tsit5()
    assert with_stepsize_tolerances(tsit5, pid) is tsit5
    # under a fixed step size Diffrax refuses the solver itself: left unwatched
    assert with_stepsize_tolerances(kvaerno, diffrax.ConstantStepSize()) is None
    with pytest.raises(ValueError, match="rtol, atol, norm"):
        gflow.dynamics.solvers.Watched(kvaerno, 0.0, 1.0)
    gflow.dynamics.solvers.Watched(filled, 0.0, 1.0)


@pytest.mark.slow
def test_an_implicit_solve_shows_its_progress_and_solves_as_before(capfd):
    """Progress lines name the implicit solver; the watched solve takes the steps
    Diffrax takes with the solver unwrapped (the same counts, the same end to
    round-off: a different program)."""
    loss, model = _flow_problem()
    kw = dict(t1=30.0, ts=[0.0, 30.0], rtol=1e-8, solver=diffrax.ImplicitEuler())
    traj = gflow.solve_flow(loss, model, progress=True, **kw)
    err = capfd.readouterr().err
    assert traj.status == "success"
    assert "ImplicitEuler" in err and "step 100" in err
    params, static = eqx.partition(model, eqx.is_inexact_array)
    y0, unravel = jax.flatten_util.ravel_pytree(params)
    field = FlatGradientField(GradientField(loss, static), unravel)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(field),
        diffrax.ImplicitEuler(),
        t0=0.0,
        t1=30.0,
        dt0=None,
        y0=y0,
        stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-8),
        max_steps=10**6,
    )
    assert traj.stats["num_steps"] == int(sol.stats["num_steps"])
    assert traj.stats["num_rejected_steps"] == int(sol.stats["num_rejected_steps"])
    final = jax.flatten_util.ravel_pytree(eqx.filter(traj.final, eqx.is_inexact_array))
    np.testing.assert_allclose(final[0], sol.ys[-1], rtol=1e-12, atol=1e-14)


def test_a_signal_handled_inside_a_host_callback_is_still_an_interrupt():
    """A signal's handler runs wherever the main thread runs Python, also inside a
    host callback of the compiled solve (the watch's, a progress line's); the
    KeyboardInterrupt it raises there reaches the caller as a JAX runtime error
    (``gflow flow`` then ended in a traceback and exit 1 at SIGTERM, about one
    run in five of test_resume_cli). With the signal noted by the watch,
    ``solve_flow`` raises KeyboardInterrupt instead."""
    loss, model = _flow_problem()

    class RaisingInside:
        calls = 0

        def __call__(self):
            self.calls += 1
            if self.calls == 4:  # the handler, run inside the callback
                raise KeyboardInterrupt
            return self.calls > 4  # the watch saw the signal

    ASKED.ask = RaisingInside()
    with pytest.raises(KeyboardInterrupt, match="inside the solve"):
        gflow.solve_flow(loss, model, t1=3000.0, **WATCHED)
