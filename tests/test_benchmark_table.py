"""The BENCHMARKS.md table withholds rows taken on a busy machine (issue 12, item 5)."""

import json

import pytest

from benchmarks import table  # the repository root is on the path (python -m pytest)


def _record(load_row, load_machine=0.5):
    return {
        "machine": {
            "processor": "x86_64",
            "cpus": 2,
            "platform": "linux",
            "devices": ["cpu:0"],
            "jax": "0",
            "date": "2026-12-01",
            "load_average": [load_machine, 0.0, 0.0],
        },
        "k": 16,
        "steps": 10,
        "rows": {
            "population": {
                "vmap_s": 0.1,
                "sequential_s": 0.4,
                "vmap_over_sequential": 0.25,
                **({} if load_row is None else {"load_1min": load_row}),
            }
        },
    }


@pytest.mark.parametrize(
    ("load_row", "load_machine", "published"),
    [(0.9, 3.0, True), (1.6, 0.5, False), (None, 2.0, False), (None, 1.2, True)],
)
def test_rows_above_the_load_limit_are_withheld(
    tmp_path, monkeypatch, load_row, load_machine, published
):
    (tmp_path / "sweep.json").write_text(json.dumps(_record(load_row, load_machine)))
    monkeypatch.setattr(table, "RESULTS", tmp_path)
    text = table.table()
    (line,) = [x for x in text.splitlines() if "population loss" in x]
    load = load_machine if load_row is None else load_row
    assert line.endswith(f"| {load:.2f} |")  # the row's own load, else the record's
    assert ("0.25×" in line) == published
    assert ("withheld" in line) == (not published)


def _compile_cache_record(imports, warm, after=None, load=1.0):
    def run(wall, at=load):
        return {"wall_s": wall, "load_before": at, "load_after": at}

    repeats = []
    for i, (bare, second) in enumerate(zip(imports, warm)):
        rep = {kind: run(9.0) for kind in ("import_gflow", "off", "first")}
        rep |= {"import": run(bare), "second": run(second)}
        rep["second_no_figures"] = run(second / 2)
        if after is not None:
            rep["import_after"] = run(after[i])
        rep["split"] = dict.fromkeys(["trace_s", "lower_s", "compile_s"], 0.1)
        rep["split"] |= {"solve_trace_s": 0.0, "programs": 1, "cache_hits": 1}
        rep["split"]["load_before"] = load
        rep |= {"solve_cached": True, "programs": 1}
        repeats.append(rep)
    machine = {"cores": 2, "date": "d", "jax": "0", "equinox": "0", "diffrax": "0"}
    return {"machine": machine, "max_load": 1.5, "repeats": repeats}


def test_the_compile_cache_verdict_needs_the_paired_ratios_too():
    from benchmarks.compile_cache import paired_ratios
    from benchmarks.compile_cache import table as cache_table

    # fastest over fastest is 6.0 / 2.0 = 3.0x, but each warm run sat between
    # slow imports' neighbours: paired, 6.0 / 2.0 and 9.0 / 2.5 -> median 3.3x
    record = _compile_cache_record([2.0, 2.6], [6.0, 9.0], after=[2.0, 2.4])
    assert paired_ratios(record) == pytest.approx([3.0, 3.6])
    text = cache_table(record)
    assert "3.0× (fastest over fastest)" in text and "3.30×" in text
    assert "**missed**" in text
    # a repeat with a run above the load limit has no paired ratio
    record["repeats"][1]["import_after"]["load_before"] = 1.9
    assert paired_ratios(record) == pytest.approx([3.0])
    assert ": met." in cache_table(record)
    # records from before the second import still render, on the old rule
    old = _compile_cache_record([2.0], [5.0])
    assert paired_ratios(old) == [] and "2.5× (fastest over fastest): met" in (
        cache_table(old)
    )
