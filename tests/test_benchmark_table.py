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
