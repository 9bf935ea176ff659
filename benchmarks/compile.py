"""Compile time of the first flow solve, as ``gflow flow`` pays it (issue 5, item 3).

Each measurement runs in a fresh Python process: the time of ``import gflow``, then
the first ``solve_flow`` of the default flow as the CLI runs it (t1 = 400, 401 saves,
MarkovObservables) minus a second, warm call; once with an empty persistent
compilation cache (which it fills) and once reading that cache.
Writes results/compile.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

from .common import load1, save

_CHILD = r"""
import json, sys, time
t = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
cache = sys.argv[2]
if cache != "-":
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
import diffrax, numpy as np
import gflow
from gflow.runs import FlowConfig
t_import = time.perf_counter() - t
cfg = FlowConfig()
solver = None if sys.argv[1] == "default" else diffrax.Tsit5()
def solve():
    tr = gflow.solve_flow(gflow.PopulationLoss(cfg.chain()), cfg.model(), t1=cfg.t1,
        ts=np.linspace(0, cfg.t1, cfg.num_saves), solver=solver, progress=False,
        observables=gflow.MarkovObservables(cfg.chain()))
    return tr
t = time.perf_counter(); solve(); first = time.perf_counter() - t
t = time.perf_counter(); solve(); second = time.perf_counter() - t
print(json.dumps({"import_s": t_import, "first_s": first, "warm_s": second,
                  "compile_s": first - second}))
"""


def _child(solver: str, cache: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, solver, cache],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(*, solvers=("tsit5", "default")) -> dict:
    rows = {}
    for solver in solvers:
        with tempfile.TemporaryDirectory() as cache:
            load = load1()
            # an empty cache compiles as without one, then writes the cache
            rows[solver] = {
                "no_cache": _child(solver, cache),
                "cache_warm": _child(solver, cache),
                "load_1min": load,
            }
        print(f"  {solver}: {rows[solver]}", flush=True)
    record = {"rows": rows}
    save("compile", record)
    return record
