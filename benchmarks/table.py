"""The results table of BENCHMARKS.md, rebuilt from benchmarks/results/*.json."""

from __future__ import annotations

import re
from pathlib import Path

from gflow.runs.files import read_json

from .common import RESULTS

DOC = Path(__file__).parent.parent / "BENCHMARKS.md"
START, END = "<!-- results:start -->", "<!-- results:end -->"


def _load(name):
    path = RESULTS / f"{name}.json"
    return read_json(path) if path.exists() else None


def _mark(ok) -> str:
    return "—" if ok is None else ("met" if ok else "**missed**")


def rows() -> list[tuple[str, str, str, str]]:
    """(measurement, value, target, verdict) for every ratio measured so far."""
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
                )
            )
    for t1 in (400, 3000):
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
                        f"{row['gflow_speedup']:.1f}× faster ({g['wall_s']:.2f} s vs "
                        f"{row['wall_s']:.2f} s); "
                        f"rel. error {g['rel_error_final']:.1e} vs"
                        f" {row['rel_error_final']:.1e}",
                        "≥10×, error ≤ scipy's",
                        _mark(ok),
                    )
                )
    if r := _load("overhead"):
        b = r["rows"]
        for name in ("tsit5", "stiff_switch", "default"):  # "default": old records
            if name not in b:
                continue
            row = b[name]
            out.append(
                (
                    f"{name} solver: cost per gradient evaluation vs a bare jitted "
                    "gradient",
                    f"{row['ratio_vs_fused']:.2f}× a fused (in-jit) gradient "
                    f"({row['us_per_grad_eval']:.1f} vs {b['bare_fused_us']:.1f} µs); "
                    f"{row['ratio_vs_python_call']:.2f}× a Python-called one "
                    f"({b['bare_python_call_us']:.1f} µs)",
                    "≤1.2×",
                    _mark(row["ratio_vs_fused"] <= 1.2),
                )
            )
    if r := _load("sweep"):
        for name, row in r["rows"].items():
            out.append(
                (
                    f"vmapped sweep of K={r['k']} SGD runs vs sequential, {name} loss",
                    f"{row['vmap_over_sequential']:.2f}× ({row['vmap_s']:.2f} s vs "
                    f"{row['sequential_s']:.2f} s)",
                    "≤0.5×",
                    _mark(row["vmap_over_sequential"] <= 0.5),
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
                )
            )
    missing = [
        name
        for name, files in {
            "stiff (item 2)": ["stiff"],
            "scipy": ["scipy_t400", "scipy_t3000"],
            "overhead": ["overhead"],
            "sweep": ["sweep"],
            "compile": ["compile"],
            "seqloss": ["seqloss"],
        }.items()
        if not any((RESULTS / f"{f}.json").exists() for f in files)
    ]
    for name in missing:
        out.append((name, "not measured (no results file)", "", "**not measured**"))
    return out


def table() -> str:
    m = None
    for name in ("stiff", "scipy_t400", "overhead", "sweep", "compile", "seqloss"):
        if r := _load(name):
            m = r["machine"]
            break
    head = ""
    if m:
        head = (
            f"Machine: {m['processor']}, {m['cpus']} CPUs, {m['platform']}, "
            f"devices {m['devices']}, jax {m['jax']}; measured {m['date']} "
            f"(load average at the time: {m['load_average']}).\n\n"
        )
    lines = ["| measurement | value | target | verdict |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows()]
    return head + "\n".join(lines) + "\n"


def write_table() -> None:
    text = DOC.read_text() if DOC.exists() else f"{START}\n{END}\n"
    block = f"{START}\n{table()}{END}"
    text = re.sub(
        re.escape(START) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S
    )
    DOC.write_text(text)
