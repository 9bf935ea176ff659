"""Interrupts seen inside compiled work: a signal watch that a solve can ask.

While a jitted solve runs, Python's main thread waits inside XLA and runs no signal
handler, so Ctrl-C (SIGINT) or a scheduler's SIGTERM waits for the whole compiled
call, however long. Python's C-level handler still notes each signal at once, and
writes its number to the *wakeup fd* (``signal.set_wakeup_fd``) if one is set.
``SignalWatch`` sets one (a non-blocking socket pair) for as long as it is entered;
``pending()`` reads it and is true from the first signal on. ``solve_flow(...,
interrupt=watch)`` asks it from inside the solve (a host callback every few dozen
steps) and ends the solve there; back in Python, the signal's own handler raises
(``KeyboardInterrupt`` for SIGINT), and ``solve_flow`` raises it if none did.

Only signals that have a Python handler are written (SIGINT always has one; the
``gflow`` command installs one for SIGTERM). The watch must be entered in the main
thread, as ``signal.set_wakeup_fd`` requires.

A compiled program that cannot hold that host callback (one kept on disk by
``gflow.runs.program_cache``: ``jax.export`` refuses host callbacks) or that has no
place to ask it (a sweep's vmapped loops) is run by ``call_interruptibly`` instead:
in a worker thread, while the main thread waits where signal handlers run. An
interrupt then ends the wait at once; the compiled call cannot be stopped, so it is
*abandoned*: its thread runs on, unused, until the call ends or the process exits
(``abandoned()``; the ``gflow`` command exits at once). The program and its inputs
are those of a call in the main thread, so its results are bit for bit the same.
Why not stop the work instead, by cutting a solve into host-level chunks of at most
N steps with the check between them: Diffrax's solution does not hold the step it
would take next, and a solve restarted from a step's end recomputes that step's end
as t0 + dt0, which rounds, so the chunks need not be bit-identical to one solve.
"""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: How often (seconds) ``call_interruptibly`` asks its interrupt while it waits.
POLL_S = 0.1

_abandoned: list[threading.Event] = []  # set when an abandoned call ends


class SignalWatch:
    """A context manager that notes every signal delivered while it is entered.

    Example::

        with SignalWatch() as watch:
            traj = gflow.solve_flow(loss, model, t1=1e6, interrupt=watch)
    """

    def __init__(self) -> None:
        self._pair: tuple[socket.socket, socket.socket] | None = None
        self._old_fd = -1
        self._tripped = False

    def __enter__(self) -> SignalWatch:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("SignalWatch must be entered in the main thread")
        read, write = socket.socketpair()
        read.setblocking(False)
        write.setblocking(False)
        self._old_fd = signal.set_wakeup_fd(write.fileno(), warn_on_full_buffer=False)
        self._pair = (read, write)
        self._tripped = False
        return self

    def __exit__(self, *exc) -> None:
        signal.set_wakeup_fd(self._old_fd)
        if self._pair is not None:
            for sock in self._pair:
                sock.close()
        self._pair = None

    def pending(self) -> bool:
        """Whether a signal arrived since the watch was entered (it stays true)."""
        if not self._tripped and self._pair is not None:
            try:
                self._tripped = bool(self._pair[0].recv(64))
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:  # closed meanwhile: nothing more arrives
                pass
        return self._tripped

    def __call__(self) -> bool:
        return self.pending()


def call_interruptibly(
    fn: Callable[..., T], *args: Any, interrupt: Callable[[], bool] | None, **kwargs
) -> T:
    """``fn(*args, **kwargs)``, returned as it is; interruptible while it runs.

    With ``interrupt`` (a ``SignalWatch``) and in the main thread, ``fn`` runs in a
    daemon thread (its outputs made ready there: JAX's ``block_until_ready``) and
    the main thread waits ``POLL_S`` at a time, so a signal's handler runs at once
    (``KeyboardInterrupt`` for SIGINT) and ``interrupt()`` is asked each time;
    once it is true, ``KeyboardInterrupt`` is raised. The thread is then left
    running (``abandoned()``) and its result is never used. An exception of ``fn``
    is raised in the caller. Without ``interrupt``, or outside the main thread,
    ``fn`` is called directly.

    ``fn`` sees JAX's global settings (``jax.config``) but not thread-local
    contexts entered by the caller (``jax.default_device``, a mesh context): pass
    what it needs as arguments.
    """
    if interrupt is None or threading.current_thread() is not threading.main_thread():
        return fn(*args, **kwargs)
    import jax

    box: dict[str, Any] = {}
    done = threading.Event()

    def work():
        try:
            box["out"] = jax.block_until_ready(fn(*args, **kwargs))
        except BaseException as e:  # raised again in the caller
            box["error"] = e
        finally:
            done.set()

    thread = threading.Thread(target=work, name="gflow-compiled-work", daemon=True)
    thread.start()
    # wait on an Event, not Thread.join: a KeyboardInterrupt inside join marks the
    # thread as finished while it still runs (CPython bpo-45274's repair)
    try:
        while not done.wait(POLL_S):  # a signal's handler runs (and may raise) here
            if interrupt():
                raise KeyboardInterrupt("interrupted by a signal during compiled work")
    except BaseException:
        if not done.is_set():
            _abandoned.append(done)
        raise
    if "error" in box:
        raise box["error"]
    return box["out"]


def abandoned() -> int:
    """How many interrupted ``call_interruptibly`` calls are still running."""
    _abandoned[:] = [done for done in _abandoned if not done.is_set()]
    return len(_abandoned)
