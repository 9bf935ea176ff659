"""``--processes N``: start N worker processes on this machine and watch them.

Worker i is ``python -m gflow ... --coordinator 127.0.0.1:PORT --num-processes N
--process-id i`` on a free port; the workers join through ``jax.distributed`` and do
the work, process 0 writing the run directory and printing its summary, which is
passed on. The parent imports no JAX and watches: when a worker ends with an error or
is killed, it stops the others (SIGTERM, then SIGKILL) and prints one line that says
which process ended how and how to resume; Ctrl-C or SIGTERM on the parent stops them
all as well, and on Linux a worker whose parent dies (even by SIGKILL) is killed too:
a worker blocked in a collective would not see a gentler signal until its peers came
back, and its finished chunks are on disk already.
"""

from __future__ import annotations

import ctypes
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

#: Seconds a worker has to end after SIGTERM before it is killed.
GRACE = 5.0


def free_port() -> int:
    """A TCP port that nothing listens on now (the coordinator's)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the worker, before it runs: SIGKILL when the parent dies (Linux prctl)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _start(argv: list[str], err: Path, *, stdout: bool) -> subprocess.Popen:
    """A worker: stderr into ``err``, stdout piped (process 0) or dropped."""
    linux = sys.platform == "linux"
    with err.open("w") as sink:
        return subprocess.Popen(
            argv,
            stdout=subprocess.PIPE if stdout else subprocess.DEVNULL,
            stderr=sink,
            text=True,
            preexec_fn=_die_with_parent if linux else None,
        )


def _stop(procs) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + GRACE
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _relay(stream, sink) -> None:
    """Pass process 0's stdout on, without gloo's connection notices."""
    for line in stream:
        if not line.startswith("[Gloo]"):
            sink.write(line)
            sink.flush()


def _how(status: int) -> str:
    if status < 0:
        try:
            return f"was killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"was killed by signal {-status}"
    return f"exited with status {status}"


def _last_error(path: Path) -> str | None:
    """The worker's own one-line error (``gflow CMD: error: ...``), if any."""
    lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    for line in reversed(lines):
        if line.startswith("gflow ") and ": error: " in line:
            return line.split(": error: ", 1)[1]
    return None


def launch(
    command: str,
    worker_args: list[str],
    count: int,
    run_dir: Path,
    *,
    global_args: list[str],
    timeout: float,
    saved: str = "the chunks finished so far are saved",
) -> int:
    """Run ``gflow [global_args] command worker_args`` as ``count`` joined processes.

    Returns 0 when every worker succeeded; otherwise prints one line on stderr and
    returns the failed worker's status (1 when it was killed). ``saved`` says, in that
    line, what a resumed run reads back.
    """
    port = free_port()
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="gflow-workers-") as tmp:
        errs = [Path(tmp) / f"process-{i}.err" for i in range(count)]
        try:
            for i in range(count):
                argv = [
                    sys.executable,
                    "-m",
                    "gflow",
                    *global_args,
                    command,
                    *worker_args,
                    "--coordinator",
                    f"127.0.0.1:{port}",
                    "--num-processes",
                    str(count),
                    "--process-id",
                    str(i),
                    "--join-timeout",
                    repr(timeout),
                ]
                procs.append(_start(argv, errs[i], stdout=i == 0))
            relay = threading.Thread(
                target=_relay, args=(procs[0].stdout, sys.stdout), daemon=True
            )
            relay.start()
            failed = None
            while failed is None and any(p.poll() is None for p in procs):
                failed = next(
                    (i for i, p in enumerate(procs) if p.poll() not in (None, 0)), None
                )
                time.sleep(0.05)
            failed = next(
                (i for i, p in enumerate(procs) if p.poll() not in (None, 0)), failed
            )
            _stop(procs)
            relay.join(timeout=GRACE)
        except BaseException:  # Ctrl-C, SIGTERM: no worker outlives the parent
            _stop(procs)
            raise
        if failed is None:
            sys.stderr.write(errs[0].read_text(errors="replace"))
            return 0
        status = procs[failed].returncode
        own = _last_error(errs[failed])
        what = f": {own}" if own else f" {_how(status)}"
        if (run_dir / "config.json").exists():
            then = (
                f"{saved}; continue with 'gflow "
                f"{command} --resume {run_dir} --processes {count}'"
            )
        else:
            then = "nothing was saved"
        others = "the other processes were stopped; " if count > 1 else ""
        print(
            f"gflow {command}: error: process {failed} of {count}{what}; "
            f"{others}{then}",
            file=sys.stderr,
        )
        return status if status > 0 else 1
