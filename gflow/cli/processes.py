"""The options that run a command over several processes, and the joining of one.

``--processes N`` starts N worker processes on this machine (``launch``, below);
``--coordinator HOST:PORT --num-processes N --process-id I`` makes this process one
of N started by hand or by a scheduler; ``--coordinator auto`` lets
``jax.distributed.initialize()`` read the number and id from the scheduler's
environment (SLURM, Open MPI, ... as JAX detects them). Joining sets the CPU
collectives and calls ``jax.distributed.initialize``: both touch JAX's global state,
so they live here, in the command line, never in the library.

``launch``: start N worker processes on this machine and watch them.

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

import argparse
import ctypes
import dataclasses
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from gflow.cli.common import UsageError

#: Seconds the processes of a run have to find each other (jax's default is 300).
JOIN_TIMEOUT = 300.0


def coordinator_address(text: str) -> str | tuple[str, int]:
    """argparse type of ``--coordinator``: ``auto`` or HOST:PORT, port 1..65535."""
    if text == "auto":
        return text
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host.strip() or any(c.isspace() for c in host):
        raise argparse.ArgumentTypeError(
            f"expected HOST:PORT (the address of process 0) or auto, got {text!r}"
        )
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise argparse.ArgumentTypeError(
            f"expected a port 1..65535 after the host, got {text!r}"
        )
    return host, int(port)


def add_process_options(parser) -> None:
    """``--processes`` and the cluster options ``--coordinator`` ... of a command."""
    parser.add_argument(
        "--processes",
        type=int,
        default=None,
        metavar="N",
        help="run over N processes on this machine, joined by jax.distributed "
        "(one device each on CPU); one run directory, written by process 0",
    )
    parser.add_argument(
        "--coordinator",
        type=coordinator_address,
        default=None,
        metavar="HOST:PORT",
        help="run as one of several processes (on several hosts): the address "
        "where process 0 runs the coordinator; 'auto' reads it, the number and "
        "this process's id from a SLURM / Open MPI environment",
    )
    parser.add_argument(
        "--num-processes",
        type=int,
        default=None,
        metavar="N",
        help="with --coordinator: how many processes run the sweep",
    )
    parser.add_argument(
        "--process-id",
        type=int,
        default=None,
        metavar="I",
        help="with --coordinator: this process, 0 .. N-1 (0 writes the run files)",
    )
    parser.add_argument(
        "--join-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"how long the processes have to find each other (default "
        f"{JOIN_TIMEOUT:g})",
    )


@dataclasses.dataclass(frozen=True)
class Plan:
    """How this command runs: ``local`` workers to start (``count``), or ``join`` a
    run of ``count`` processes as ``index`` (None: from the scheduler), or neither
    (one process)."""

    local: bool = False
    join: bool = False
    count: int = 1
    index: int | None = None
    coordinator: str | tuple[str, int] | None = None
    timeout: float = JOIN_TIMEOUT


def plan(args) -> Plan:
    """Check the process options of ``args`` together; UsageError names the fix."""
    timeout = args.join_timeout
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise UsageError(f"--join-timeout: must be > 0 seconds, got {timeout}")
    timeout = JOIN_TIMEOUT if timeout is None else timeout
    cluster = [
        flag
        for flag, value in (
            ("--coordinator", args.coordinator),
            ("--num-processes", args.num_processes),
            ("--process-id", args.process_id),
        )
        if value is not None
    ]
    if args.num_processes is not None and args.num_processes < 1:
        raise UsageError(
            f"--num-processes: need at least 1 process, got {args.num_processes}"
        )
    if args.process_id is not None and args.process_id < 0:
        raise UsageError(f"--process-id: must be >= 0, got {args.process_id}")
    if args.processes is not None:
        if args.processes < 1:
            raise UsageError(f"--processes: need at least 1, got {args.processes}")
        if cluster:
            raise UsageError(
                f"--processes starts its own processes on this machine; drop "
                f"{' and '.join(cluster)} (or drop --processes to run as one process "
                "of a cluster)"
            )
        return Plan(local=args.processes > 1, count=args.processes, timeout=timeout)
    if args.coordinator == "auto":
        if args.num_processes is not None or args.process_id is not None:
            raise UsageError(
                "--coordinator auto reads the process count and id from the "
                "scheduler; drop --num-processes and --process-id"
            )
        return Plan(join=True, coordinator="auto", timeout=timeout)
    if cluster:
        if len(cluster) < 3:
            missing = {"--coordinator": "HOST:PORT", "--num-processes": "N"}
            missing["--process-id"] = "I"
            need = [f"{f} {v}" for f, v in missing.items() if f not in cluster]
            raise UsageError(
                f"{' and '.join(cluster)} needs {' and '.join(need)} as well (or "
                "--coordinator auto under a scheduler)"
            )
        if args.process_id >= args.num_processes:
            raise UsageError(
                f"--process-id: must lie in 0 .. {args.num_processes - 1} for "
                f"--num-processes {args.num_processes}, got {args.process_id}"
            )
        return Plan(
            join=args.num_processes > 1,
            count=args.num_processes,
            index=args.process_id,
            coordinator=args.coordinator,
            timeout=timeout,
        )
    if args.join_timeout is not None:
        raise UsageError(
            "--join-timeout applies only with --processes or --coordinator; drop it"
        )
    return Plan()


def _check_address(host: str, port: int, index: int | None) -> None:
    """Fail at once, in one line, on an address that cannot work."""
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        raise UsageError(
            f"--coordinator {host}:{port}: cannot resolve {host} ({e.strerror}); "
            "give the host name or IP address of process 0"
        ) from None
    if index == 0:  # process 0 runs the coordinator service on this port
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("", port))
            except OSError as e:
                raise UsageError(
                    f"--coordinator {host}:{port}: process 0 cannot listen on port "
                    f"{port} ({e.strerror}); choose a free port"
                ) from None


def join(p: Plan, command: str):
    """Join the run that ``p`` describes (before any JAX computation); returns this
    process's ``gflow.runs.distributed.Processes``.

    JAX's own failures to join abort the process with a stack trace; a watchdog
    ends it first, after ``p.timeout`` seconds, with one line and exit status 2.
    """
    import jax

    from gflow.runs.distributed import Processes

    # the collectives of CPU processes (jax 0.10's default, stated here, not assumed)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if p.coordinator == "auto":
        where, kwargs = "--coordinator auto", {}
    else:
        host, port = p.coordinator
        _check_address(host, port, p.index)
        where = f"--coordinator {host}:{port}"
        kwargs = dict(
            coordinator_address=f"{host}:{port}",
            num_processes=p.count,
            process_id=p.index,
        )

    me = "this process" if p.index is None else f"this is process {p.index}"

    def give_up():
        print(
            f"gflow {command}: error: {where}: the processes did not all join within "
            f"{p.timeout:g} s ({me}); start every process with "
            "the same --coordinator and --num-processes and its own --process-id, "
            "with process 0 on that host, or raise --join-timeout",
            file=sys.stderr,
            flush=True,
        )
        os._exit(2)  # jax's join is blocked in C++: nothing else would end it

    watchdog = threading.Timer(p.timeout, give_up)
    watchdog.daemon = True
    watchdog.start()
    try:
        jax.distributed.initialize(**kwargs, initialization_timeout=int(p.timeout) + 30)
    except (RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UsageError(
            f"{where}: cannot join the run ({first}); outside a SLURM or Open MPI "
            "job give --coordinator HOST:PORT --num-processes N --process-id I"
        ) from None
    finally:
        watchdog.cancel()
    return Processes.current()


def check_run_dir(out, same, processes, command: str) -> None:
    """Every process sees the run directory of process 0 and runs its configuration
    (a collective: all processes call it once process 0 has written config.json).

    ``same()``: whether this process's configuration is the one in
    ``out/config.json``; an error reading it counts as no.
    """
    from gflow.runs.distributed import barrier, failing

    barrier(f"gflow {command}: config.json written", processes)
    try:
        ok = bool(same())
    except (OSError, KeyError, TypeError, ValueError):  # UsageError included
        ok = False
    bad = failing(ok, processes)
    if bad:
        raise UsageError(
            f"--out {out}: process(es) {', '.join(map(str, bad))} of "
            f"{processes.count} do not see {out / 'config.json'} as process 0 wrote "
            "it; put the run directory on a filesystem that every process shares "
            "and start every process with the same settings"
        )


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
