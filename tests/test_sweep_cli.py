"""The issue's acceptance runs of ``gflow sweep``; minutes each, so marked slow."""

import json

import pytest

from gflow.cli import main


@pytest.mark.slow
def test_sgd_is_first_order_against_the_flow(tmp_path):
    out = tmp_path / "flow"
    args = ["--quiet", "sweep", "--optimizer", "sgd", "--t1", "60", "--out", str(out)]
    assert main([*args, "--lrs", "0.4,0.2,0.1,0.05"]) == 0
    res = json.loads((out / "sweep.json").read_text())
    assert 0.85 <= res["order"] <= 1.15
    assert [m["status"] for m in res["members"]] == ["success"] * 4
    errors = [m["error"] for m in res["members"]]
    assert errors == sorted(errors, reverse=True)
    # Richardson extrapolation beats the smallest step size
    assert res["richardson"]["error"] < res["members"][3]["error"]
    for fig in ("error_vs_lr.png", "trajectories.png", "departure.png"):
        assert (out / fig).stat().st_size > 0


@pytest.mark.slow
def test_sgd_is_second_order_against_modified_flow(tmp_path):
    out = tmp_path / "modified"
    argv = ["--quiet", "sweep", "--lrs", "0.4,0.2,0.1,0.05", "--t1", "60"]
    assert main([*argv, "--reference", "modified", "--out", str(out)]) == 0
    res = json.loads((out / "sweep.json").read_text())
    assert 1.7 <= res["order"] <= 2.3


def test_bad_options_are_usage_errors(capsys):
    assert (
        main(
            ["sweep", "--lrs", "0.1", "--reference", "modified", "--optimizer", "adam"]
        )
        == 2
    )
    assert "modified" in capsys.readouterr().err
    assert main(["sweep", "--lrs", "0.1,-1"]) == 2
