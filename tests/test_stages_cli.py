"""`gflow flow` writes stages.json with the four stages in order (slow: real flows)."""

import json

import pytest

from gflow.cli import main

FOUR = ["condensation", "focus", "dilution", "asymmetry_lifting"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra", [[], ["--init-scale", "1e-2"], ["--init-scale", "1e-4", "--t1", "500"]]
)
def test_flow_writes_four_stages_in_order(tmp_path, extra):
    out = tmp_path / "run"
    assert main(["--quiet", "flow", "--out", str(out), *extra]) == 0
    stages = json.loads((out / "stages.json").read_text())
    paper = [s["stage"] for s in stages if s["stage"] in FOUR]
    assert paper[:4] == FOUR
    # every stage has its four fields; one the run ends before closing is also
    # marked provisional (issue 34 point 4); an attention move names its key
    keys = {"stage", "t_start", "t_end", "cycle"}
    assert all(keys <= set(s) <= keys | {"provisional", "key"} for s in stages)
    assert {s["key"] for s in stages if s["stage"] in ("focus", "dilution")} <= {
        "top",
        "self",
    }
    assert all(s.get("provisional", True) is True for s in stages)
    assert [s["t_start"] for s in stages] == sorted(s["t_start"] for s in stages)
    assert (out / "stages.png").stat().st_size > 0
