"""Runs repeated over seeds, each kept as it finishes: what the experiments share
to be resumable per seed (a rerun reads the seeds already run and runs the rest).
"""

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from experiments import _docs


def over_seeds(
    path: Path, key: dict, seeds: Iterable[int], run: Callable[[int], dict]
) -> dict:
    """``run(seed)`` for every seed not yet in ``path`` (a JSON file), saved after
    each one; returns ``key`` with ``"seeds"`` (seed as text -> result),
    ``"seconds"`` (the runs' time over every invocation) and ``"uptime_at_start"``.
    A file saved under another ``key`` (other settings) is started over."""
    saved = json.loads(path.read_text()) if path.exists() else {}
    if {k: saved.get(k) for k in key} != json.loads(json.dumps(key)):
        saved = key | {"seeds": {}, "uptime_at_start": _docs.uptime(), "seconds": 0}
    for seed in seeds:
        if str(seed) in saved["seeds"]:
            continue
        start = time.perf_counter()
        saved["seeds"][str(seed)] = run(seed)
        saved["seconds"] += time.perf_counter() - start
        print(f"seed {seed}: {time.perf_counter() - start:.0f} s", flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".tmp").write_text(json.dumps(saved))
        path.with_suffix(".tmp").replace(path)
    return saved
