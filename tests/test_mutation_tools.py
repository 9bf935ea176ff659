"""The mutation tools' own arithmetic: the seeded sample and the Wilson interval."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

HERE = Path(__file__).parent / "mutation"


def _load(name):
    spec = importlib.util.spec_from_file_location(
        f"mutation_{name}", HERE / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sample_is_seeded_per_file_and_without_repeats(tmp_path):
    sample = _load("sample")
    names = [f"gflow.a.x_f__mutmut_{k}" for k in range(1, 41)]
    meta = tmp_path / "gflow" / "a.py.meta"
    meta.parent.mkdir()
    meta.write_text(json.dumps({"exit_code_by_key": dict.fromkeys(names)}))
    got = sample.sample(sample.mutant_names("gflow/a.py", tmp_path), 10, "0:gflow/a.py")
    assert len(got) == len(set(got)) == 10 and set(got) <= set(names)
    assert got == sample.sample(list(reversed(names)), 10, "0:gflow/a.py")
    assert got != sample.sample(names, 10, "1:gflow/a.py")
    assert sample.sample(names, 99, 0) == sorted(names)


def test_the_wilson_interval_against_its_closed_form():
    score = _load("score")
    # n = 20, 17 killed: p = 0.85, z = 1.96; worked by hand from Wilson's formula
    z, n, p = 1.96, 20, 0.85
    centre = (p + z**2 / 40) / (1 + z**2 / 20)
    half = z * ((p * (1 - p) / 20 + z**2 / 1600) ** 0.5) / (1 + z**2 / 20)
    lo, hi = score.wilson(17, n)
    assert lo == pytest.approx(100 * (centre - half)) and hi == pytest.approx(
        100 * (centre + half)
    )
    assert 63 < lo < 64 and 94 < hi < 95  # the tabulated 63.9%-94.8%
    assert score.wilson(0, 0)[0] != score.wilson(0, 0)[0]  # nan: nothing checked
    full = Counter(killed=17, survived=3)
    assert score.interval(full) == ""  # every mutant checked: no interval
    assert score.interval(full + Counter(unchecked=5)) == "  [64-95%]"
