"""The results table of BENCHMARKS.md, rebuilt from benchmarks/results/*.json."""

from __future__ import annotations

import re
from pathlib import Path

from gflow.runs import read_json

from .common import RESULTS

DOC = Path(__file__).parent.parent / "BENCHMARKS.md"
START, END = "<!-- results:start -->", "<!-- results:end -->"
#: Rows taken above this 1-minute load average are not published (issue 12).
MAX_LOAD = 1.5


def _load(name):
    path = RESULTS / f"{name}.json"
    return read_json(path) if path.exists() else None


def _load_of(row: dict, record: dict) -> float | None:
    """The 1-minute load average at which ``row`` was taken (the record's, for
    records older than per-row loads)."""
    for key in ("load_1min", "load_average"):
        if isinstance(row.get(key), (int, float)):
            return float(row[key])
    load = record.get("machine", {}).get("load_average")
    return float(load[0]) if load else None


def _mark(ok) -> str:
    return "—" if ok is None else ("met" if ok else "**missed**")


def rows() -> list[tuple[str, str, str, str, float | None]]:
    """(measurement, value, target, verdict, load) for every ratio measured so far."""
    out = []
    if r := _load("stiff"):
        s = r["solvers"]
        for name in [n for n in s if n != "tsit5"]:
            row = s[name]
            fast = row["speedup_vs_tsit5"] >= 10
            verdict = (
                f"speed {_mark(fast)}, accuracy {_mark(row['as_accurate_as_tsit5'])}"
            )
            out.append(
                (
                    f"default flow to t={r['t1']:g}, rtol {r['rtol']:g}: {name} vs "
                    "Tsit5+PID, wall time",
                    f"{row['speedup_vs_tsit5']:.1f}× faster ({row['wall_s']:.2f} s vs "
                    f"{s['tsit5']['wall_s']:.2f} s); "
                    f"{row['grad_eval_ratio_vs_tsit5']:.1f}×"
                    f" fewer grad evals; rel. error {row['rel_error_final']:.1e} vs "
                    f"{s['tsit5']['rel_error_final']:.1e}",
                    "≥10× (goal 50×), error ≤ Tsit5's",
                    verdict,
                    _load_of(row, r),
                )
            )
    if (r := _load("error_scale")) and (base := _load("stiff")):
        b = base["solvers"]["tsit5"]
        for scale, row in r["rows"].items():
            out.append(
                (
                    f"default flow to t={r['t1']:g}, rtol {r['rtol']:g}: StiffSwitch "
                    f"with stiff_error_scale={scale} (separate process)",
                    f"rel. error {row['rel_error_final']:.1e} vs Tsit5's "
                    f"{b['rel_error_final']:.1e}; {row['grad_evals']} grad evals; "
                    f"{row['wall_s']:.1f} s warm",
                    "error ≤ Tsit5's",
                    _mark(row["rel_error_final"] <= b["rel_error_final"]),
                    _load_of(row, r),
                )
            )
    for t1 in (300, 3000):  # the sections scipy and scipy_stiff
        if r := _load(f"scipy_t{t1}"):
            g = r["solvers"]["gflow"]
            for m, row in r["solvers"].items():
                if m == "gflow":
                    continue
                ok = row["gflow_speedup"] >= 10 and row["gflow_as_accurate"]
                out.append(
                    (
                        f"gflow ({g['solver']}) vs scipy solve_ivp {m}, t={t1}, "
                        f"rtol {r['rtol']:g}",
                        f"{row['gflow_speedup']:.1f}× faster ({g['wall_s']:.3g} s vs "
                        f"{row['wall_s']:.3g} s); "
                        f"rel. error {g['rel_error_final']:.1e} vs"
                        f" {row['rel_error_final']:.1e}",
                        "≥10×, error ≤ scipy's",
                        _mark(ok),
                        max(_load_of(row, r) or 0.0, _load_of(g, r) or 0.0),
                    )
                )
    if r := _load("overhead"):
        b = r["rows"]
        for name, row in b.items():
            if not isinstance(row, dict):
                continue
            rate = row.get("grad_evals_per_s", 1e6 / row["us_per_grad_eval"])
            out.append(
                (
                    f"{name} solver: warm gradient evaluations per second vs a bare "
                    f"jitted gradient (t={r['t1']:g})",
                    f"{rate:,.0f}/s; {row['ratio_vs_fused']:.2f}× the cost of a fused "
                    f"(in-jit) gradient ({row['us_per_grad_eval']:.1f} vs "
                    f"{b['bare_fused_us']:.1f} µs, {1e6 / b['bare_fused_us']:,.0f}/s); "
                    f"{row['ratio_vs_python_call']:.2f}× a Python-called one "
                    f"({b['bare_python_call_us']:.1f} µs)",
                    "≤1.2×",
                    _mark(row["ratio_vs_fused"] <= 1.2),
                    _load_of(row, r),
                )
            )
        for row in r.get("plain_diffrax", []):
            out.append(
                (
                    f"gflow's overhead: solve_flow ({row['solver']}) vs plain Diffrax "
                    f"on a tuple of matrices, same solver, t={row['t1']:g}",
                    f"{row['gflow_over_plain']:.2f}× ({row['gflow_s']:.3g} s vs "
                    f"{row['plain_diffrax_s']:.3g} s; {row['num_steps_gflow']} vs "
                    f"{row['num_steps_plain']} steps)",
                    "≤1.1×",
                    _mark(row["gflow_over_plain"] <= 1.1),
                    _load_of(row, r),
                )
            )
    if r := _load("sweep"):
        for name, row in r["rows"].items():
            out.append(
                (
                    f"vmapped sweep of K={r['k']} SGD runs vs sequential, {name} loss",
                    f"{row['vmap_over_sequential']:.2f}× ({row['vmap_s']:.2f} s vs "
                    f"{row['sequential_s']:.2f} s)"
                    + (
                        f"; a bare vmapped gradient-descent loop "
                        f"{row['bare_vmap_over_sequential']:.2f}×"
                        if "bare_vmap_over_sequential" in row
                        else ""
                    ),
                    "≤0.5×",
                    _mark(row["vmap_over_sequential"] <= 0.5),
                    _load_of(row, r),
                )
            )
    if r := _load("compile"):
        for name, row in r["rows"].items():
            nc, cw = row["no_cache"], row["cache_warm"]
            out.append(
                (
                    f"first `gflow flow` solve ({name} solver): compile time",
                    f"{nc['compile_s']:.1f} s cold, "
                    f"{cw['compile_s']:.1f} s with a warm "
                    f"persistent cache; `import gflow` {nc['import_s']:.1f} s",
                    "≤5 s",
                    _mark(nc["compile_s"] <= 5),
                    _load_of(row, r),
                )
            )
    if r := _load("seqloss"):
        for name, row in r["rows"].items():
            out.append(
                (
                    f"sequence-loss gradient, {name}: gathered vs d×d form "
                    f"(batch {r['batch']}, s={r['length']})",
                    f"gathered {row['gathered_ms']:.2f} ms, "
                    f"d×d {row['dense_ms']:.2f} ms "
                    f"(d×d {row['gathered_over_dense']:.1f}× faster)",
                    "report",
                    "—",
                    _load_of(row, r),
                )
            )
    missing = [
        name
        for name, files in {
            "stiff (item 2)": ["stiff"],
            "scipy": ["scipy_t300", "scipy_t3000"],
            "overhead": ["overhead"],
            "sweep": ["sweep"],
            "compile": ["compile"],
            "seqloss": ["seqloss"],
        }.items()
        if not any((RESULTS / f"{f}.json").exists() for f in files)
    ]
    for name in missing:
        out.append(
            (name, "not measured (no results file)", "", "**not measured**", None)
        )
    return out


def table() -> str:
    """The markdown table; a row taken above ``MAX_LOAD`` is withheld, not shown."""
    m = None
    for name in ("stiff", "scipy_t300", "overhead", "sweep", "compile", "seqloss"):
        if r := _load(name):
            m = r["machine"]
            break
    head = ""
    if m:
        head = (
            f"Machine: {m['processor']}, {m['cpus']} CPUs, {m['platform']}, "
            f"devices {m['devices']}, jax {m['jax']}; first record {m['date']}. "
            "Seeds: every row is one timed configuration; the default flow starts "
            "from the initial weights of `jax.random.key(0)` "
            "(`benchmarks.common.SEED`), and each section's module names the "
            "keys of its other samples (e.g. `seqloss`: tokens from "
            "`jax.random.key(1)`; `sweep`: `jax.random.key(2)`). "
            f"Each row gives the 1-minute load average at which it was taken; rows "
            f"taken above {MAX_LOAD} are withheld until rerun on a quiet machine.\n\n"
        )
    lines = [
        "| measurement | value | target | verdict | load (1 min) |",
        "|---|---|---|---|---|",
    ]
    for a, b, c, d, load in rows():
        if load is not None and load > MAX_LOAD:
            b = f"withheld: taken at load {load:.2f} > {MAX_LOAD}"
            d = "**rerun on a quiet machine**"
        shown = "—" if load is None else f"{load:.2f}"
        lines.append(f"| {a} | {b} | {c} | {d} | {shown} |")
    return head + "\n".join(lines) + "\n"


def write_table() -> None:
    text = DOC.read_text() if DOC.exists() else f"{START}\n{END}\n"
    block = f"{START}\n{table()}{END}"
    text = re.sub(
        re.escape(START) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S
    )
    DOC.write_text(text)
