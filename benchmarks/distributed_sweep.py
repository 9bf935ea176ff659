"""A sweep over 1, 2 and 4 processes on this machine (issue 17): the wall time.

Question: what does ``gflow sweep --processes N`` (N workers joined by
``jax.distributed`` on CPU, one device each) cost or save against one process, for
the default sweep ``gflow sweep --optimizer sgd --lrs 0.4,0.2,0.1,0.05 --t1 60``?

Command:  PYTHONPATH=$PWD python benchmarks/distributed_sweep.py [--quick]
          PYTHONPATH=$PWD python benchmarks/distributed_sweep.py --write-docs
          PYTHONPATH=$PWD python -m benchmarks --only distributed --no-table
Runtime:  about 3 min on 2 cores (3 process counts × 2 repeats, ~15 s a run, plus
          the waits for the load to fall); ``--quick``: 1 repeat.
Writes:   benchmarks/results/distributed_sweep.json (machine, cores, load averages,
          every time); ``--write-docs`` rewrites the block between the
          ``distributed_sweep`` markers in BENCHMARKS.md from that record.

Each run is the whole command as a user runs it, ``python -m gflow --quiet sweep ...
[--processes N]`` in a fresh directory, timed from start to exit: interpreter and
JAX start-up of every process, the join, compilation, the members, process 0's
comparison with the reference flows and its figures. ``members`` is the part the
processes share (from the start of the members to process 0 having all of them,
``members_wall_s`` in sweep.json). Without ``--processes`` the four step sizes are
one chunk of 4 (one vmapped program); over N processes they are chunks of 4 / N.
Process counts are interleaved within each repeat; the minimum over repeats is
reported. Before each run the benchmark waits until the 1-minute load average is at
most 1.5 (the 2 cores are shared; at most ``--max-wait`` seconds) and records it; a
run that started above 1.5 is left out of the table (and named under it), and
``--write-docs`` refuses a record with no admissible run of some process count.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.quiet import gated_main, replace_block

RESULTS = Path(__file__).parent / "results"
COMMAND = ["sweep", "--optimizer", "sgd", "--lrs", "0.4,0.2,0.1,0.05", "--t1", "60"]
PROCESSES = (1, 2, 4)
MAX_LOAD = 1.5


def _wait_for_quiet(max_wait: float) -> float:
    """The 1-minute load average once it is at most MAX_LOAD (or after max_wait s)."""
    deadline = time.monotonic() + max_wait
    while os.getloadavg()[0] > MAX_LOAD and time.monotonic() < deadline:
        time.sleep(5)
    return os.getloadavg()[0]


def _one(n: int, max_wait: float) -> dict:
    load = _wait_for_quiet(max_wait)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        argv = [sys.executable, "-m", "gflow", "--quiet", *COMMAND, "--out", str(out)]
        if n > 1:
            argv += ["--processes", str(n)]
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr.strip()}")
        sweep = json.loads((out / "sweep.json").read_text())
    return {
        "processes": n,
        "wall_s": wall,
        "members_s": sweep["members_wall_s"],
        "load_before": load,
        "load_after": os.getloadavg()[0],
        "members": sweep["members"],
    }


def _machine() -> dict:
    from importlib.metadata import version

    return {
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "jax": version("jax"),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="minutes"
        ),
    }


def run(repeats: int = 2, max_wait: float = 600.0) -> dict:
    machine = _machine()
    runs = [_one(n, max_wait) for _ in range(repeats) for n in PROCESSES]
    first = {r["processes"]: r["members"] for r in runs}
    same = all(r["members"] == first[1] for r in runs)  # every number equal
    for r in runs:
        del r["members"]
    record = {
        "machine": machine,
        "command": "gflow " + " ".join(COMMAND),
        "cores": os.cpu_count(),
        "repeats": repeats,
        "max_load": MAX_LOAD,
        "members_equal": same,
        "runs": runs,
    }
    record["rows"] = rows(record)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "distributed_sweep.json").write_text(json.dumps(record, indent=2))
    _figure(record)
    print(table(record))
    return record


def admissible(record: dict) -> list[dict]:
    """The runs that started at a 1-minute load average of at most max_load."""
    return [r for r in record["runs"] if r["load_before"] <= record["max_load"]]


def rows(record: dict) -> list[dict]:
    """Per process count, its fastest admissible run (none: left out)."""
    out = []
    for n in PROCESSES:
        mine = [r for r in admissible(record) if r["processes"] == n]
        if mine:
            out.append(min(mine, key=lambda r: r["wall_s"]))
    return out


def _figure(record: dict) -> None:
    from gflow.plotting import plt, save_figure

    n = [r["processes"] for r in record["rows"]]
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.plot(n, [r["wall_s"] for r in record["rows"]], "o-", label="whole command")
    ax.plot(n, [r["members_s"] for r in record["rows"]], "s--", label="members")
    ax.set_xticks(n)
    ax.set_xlabel(f"processes ({record['cores']} cores)")
    ax.set_ylabel("wall time (s)")
    ax.set_ylim(bottom=0)
    ax.set_title("gflow sweep --processes N, default sweep", fontsize=9)
    ax.legend(fontsize=8)
    save_figure(fig, RESULTS / "distributed_sweep.png")


def table(record: dict) -> str:
    runs, kept = record["runs"], admissible(record)
    loads = [r["load_before"] for r in kept]
    left_out = [r for r in runs if r not in kept]
    lines = [
        f"`{record['command']} [--processes N]` on {record['cores']} cores, "
        f"{record['machine']['date']} (jax {record['machine']['jax']}); the fastest "
        f"of {record['repeats']} interleaved runs, 1-minute load average "
        f"{min(loads):.2f}-{max(loads):.2f} at their start"
        + (
            "; left out, as started above "
            f"{record['max_load']} (another job): "
            + ", ".join(
                f"{r['processes']} process(es), {r['wall_s']:.1f} s at load "
                f"{r['load_before']:.2f}"
                for r in left_out
            )
            if left_out
            else ""
        )
        + ". Members equal to one process's in every run: "
        + ("yes." if record["members_equal"] else "NO.")
        + " One seed, the command's default (`--seed 0`): a timing.",
        "",
        "| processes | wall time | members (shared part) | load at start → end |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for r in rows(record):
        lines.append(
            f"| {r['processes']} | {r['wall_s']:.1f} s | {r['members_s']:.1f} s | "
            f"{r['load_before']:.2f} → {r['load_after']:.2f} |"
        )
    return "\n".join(lines) + "\n"


DOC = Path(__file__).resolve().parent.parent / "BENCHMARKS.md"
START, END = "<!-- distributed_sweep:start -->", "<!-- distributed_sweep:end -->"


def write_docs() -> None:
    """Put the table of results/distributed_sweep.json into BENCHMARKS.md."""
    record = json.loads((RESULTS / "distributed_sweep.json").read_text())
    missing = set(PROCESSES) - {r["processes"] for r in rows(record)}
    if missing:
        raise SystemExit(
            f"no run of {sorted(missing)} process(es) started at a load average of "
            f"at most {record['max_load']}: measure again on a quieter machine"
        )
    replace_block(DOC, START, END, table(record))


def main(argv=None) -> int:
    return gated_main(__doc__.splitlines()[0], run, write_docs, argv)


if __name__ == "__main__":
    raise SystemExit(main())
