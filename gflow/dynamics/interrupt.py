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
"""

from __future__ import annotations

import signal
import socket
import threading


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
