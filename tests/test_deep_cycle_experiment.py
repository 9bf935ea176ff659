"""experiments/deep_cycle.py: the quick path end to end (Markov only, ~20 s), and
its departure rule on made-up curves."""

import json

import numpy as np
import pytest


@pytest.fixture(scope="module")
def deep_cycle():
    from experiments import deep_cycle

    return deep_cycle


@pytest.mark.slow  # 15-20 s: CI's slow step runs it
def test_quick_run_writes_results_and_leaves_the_doc_alone(deep_cycle, tmp_path):
    doc = deep_cycle.DOC
    before = doc.read_text() if doc.exists() else None
    out = tmp_path / "quick"
    assert deep_cycle.main(["--quick", "--datasets", "markov", "--out", str(out)]) == 0
    assert (doc.read_text() if doc.exists() else None) == before
    results = json.loads((out / "results.json").read_text())
    cfg = deep_cycle.QUICK
    runs = results["runs"]
    assert len(runs) == len(cfg.seeds) * len(deep_cycle.METHODS)
    for r in runs:
        assert r["data"] == "markov" and (r["layers"], r["heads"]) == (2, 2)
        assert len(r["t"]) == cfg.num_saves and len(r["loss"]) == cfg.num_saves
        assert np.asarray(r["head_entropy"]).shape == (cfg.num_saves, 2, 2)
        assert all(s["stage"] in deep_cycle.STAGE_LETTERS for s in r["stages"])
        assert ("departure" in r) == (r["method"] != "gd")
    gd = [r for r in runs if r["method"] == "gd"]
    sgd = [r for r in runs if r["method"] == "sgd"]
    # gd and sgd share their step size, hence their clock; AdamW's is its own
    assert gd[0]["t"] == sgd[0]["t"] and gd[0]["t"][-1] == pytest.approx(
        cfg.lr * cfg.steps
    )
    # the seeds reuse the first seed's compiled programs
    wall = {s: sum(r["wall_s"] for r in runs if r["seed"] == s) for s in cfg.seeds}
    assert wall[cfg.seeds[1]] < 0.5 * wall[cfg.seeds[0]]
    assert results["runtime_s"] > 0 and results["load_averages"]
    text = (out / "summary.md").read_text()
    assert "| markov | 2×2 | adamw |" in text and "total runtime" in text


def test_departure_first_and_for_good(deep_cycle):
    t = np.linspace(0.0, 10.0, 11)
    ent = np.full((11, 1, 2), 4.0)
    tol = {"loss_tol": 0.05, "entropy_tol": 0.1}

    def rec(loss, entropy):
        return {"t": t, "loss": loss, "head_entropy": entropy}

    gd = rec(np.ones(11), ent)
    same = deep_cycle.departure(gd, gd, **tol)
    assert same["leaves"] is None and same["leaves_for_good"] is None
    loss = np.ones(11)
    loss[2] += 0.2  # a transient: past the threshold once, then back
    loss[6:] += 0.1  # and for good from t = 6
    moved = ent.copy()
    moved[8:, 0, 1] -= 0.3  # one head's entropy, for good from t = 8
    out = deep_cycle.departure(rec(loss, moved), gd, **tol)
    assert (out["loss"], out["loss_for_good"]) == (2.0, 6.0)
    assert (out["entropy"], out["entropy_for_good"]) == (8.0, 8.0)
    assert (out["leaves"], out["leaves_for_good"]) == (2.0, 6.0)
    # AdamW's clock ends earlier: GD is interpolated at the run's times
    half = rec(np.ones(6), ent[:6])
    half["t"] = np.linspace(0.0, 5.0, 6)
    assert deep_cycle.departure(half, gd, **tol)["leaves"] is None


def test_head_fractions_count_heads_not_the_global_lifting():
    """Oracle: two seeds of a 1×2 run by hand; a global (layer −1) lifting is no
    head's, so the lifting fraction stays within [0, 1]."""
    from experiments import deep_cycle as dc

    def st(stage, layer, head, cycle=1):
        return {"stage": stage, "layer": layer, "head": head, "cycle": cycle}

    runs = [
        {
            "data": "markov",
            "layers": 1,
            "heads": 2,
            "method": "gd",
            "stages": [
                st("focus", 0, 0),
                st("focus", 0, 1),
                st("dilution", 0, 1),
                st("asymmetry_lifting", -1, -1),
                st("asymmetry_lifting", 0, 0),
            ],
        },
        {
            "data": "markov",
            "layers": 1,
            "heads": 2,
            "method": "gd",
            "stages": [st("focus", 0, 0), st("focus", 0, 0, cycle=2)],
        },
    ]
    cell = dc.head_fractions({"runs": runs})[("markov", "gd")]
    assert cell["arch"] == ["1×2"]
    assert cell["focus"] == [3 / 4]  # heads (0,0), (0,1) of seed 0 and (0,0) of 1
    assert cell["dilution"] == [1 / 4]
    assert cell["asymmetry_lifting"] == [1 / 4]  # the global one is left out
    assert cell["second"] == [1 / 2]
