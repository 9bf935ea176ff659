"""experiments/monitor_training.py: the quick path end to end (TinyStories, ~10 s).

It checks what the experiment claims of itself: 3 seeds × 2 arms from one compiled
train step, the clock is the sum of the step sizes taken, the reaction changes the
multiplier exactly at the step at which the first dilution was reported (and only
then), the two arms agree bit for bit until it, and the doc is left alone.
"""

import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "data" / "tinystories" / "sample.txt"


@pytest.fixture(scope="module")
def monitor_training():
    from experiments import monitor_training

    return monitor_training


@pytest.mark.slow  # ~10 s: CI's slow step runs it
@pytest.mark.skipif(not CORPUS.exists(), reason=f"TinyStories sample {CORPUS} absent")
def test_quick_run_reacts_at_the_first_dilution(
    monitor_training, tmp_path, monkeypatch
):
    mt = monitor_training
    # the doc and figure the full run writes: copies here (the real doc may be
    # edited by others while the test runs); --quick must leave them alone
    doc = tmp_path / "monitor.md"
    doc.write_text(f"# doc\n\n{mt.START}\nold\n{mt.END}\n")
    monkeypatch.setattr(mt, "DOC", doc)
    monkeypatch.setattr(mt, "FIGURE", tmp_path / "figures" / "monitor_training.png")
    out = tmp_path / "quick"
    assert mt.main(["--quick", "--out", str(out)]) == 0
    assert doc.read_text() == f"# doc\n\n{mt.START}\nold\n{mt.END}\n"
    assert not mt.FIGURE.exists()

    results = json.loads((out / "results.json").read_text())
    cfg = mt.QUICK
    runs = results["runs"]
    assert sorted((r["seed"], r["arm"]) for r in runs) == sorted(
        (s, a) for s in cfg.seeds for a in mt.ARMS
    )
    assert results["train_traces"] == 1  # one program for every run
    schedule = mt.Trainer(cfg).schedule
    reacted = 0
    for r in runs:
        eta, mult = np.asarray(r["eta"]), np.asarray(r["multiplier"])
        assert len(eta) == len(mult) == cfg.steps
        # the clock is the running sum of the step sizes the train step returned
        t_expected = np.concatenate([[0.0], np.cumsum(eta)])[r["steps"]]
        np.testing.assert_allclose(r["t"], t_expected, rtol=1e-12, atol=1e-12)
        assert r["t_final"] == pytest.approx(eta.sum(), rel=1e-12)
        assert r["steps"] == list(range(0, cfg.steps + 1, cfg.every))
        # and each step size is the schedule times the multiplier in force
        s = np.array([float(schedule(k)) for k in range(cfg.steps)])
        np.testing.assert_allclose(eta, s * mult, rtol=1e-6, atol=1e-9)
        # the monitor's own files hold the same clock and events
        mdir = out / "monitors" / r["monitor_dir"]
        rows = np.genfromtxt(mdir / "metrics.csv", delimiter=",", names=True)
        np.testing.assert_allclose(rows["t"], r["t"], rtol=1e-12)
        lines = (mdir / "events.jsonl").read_text().splitlines()
        logged = [json.loads(x) for x in lines]
        assert logged == r["events"]
        dilutions = [e for e in r["events"] if e["event"] == "dilution"]
        if r["arm"] == "baseline":
            assert r["reaction"] is None and np.all(mult == 1.0)
            continue
        assert r["same_as_baseline_until_reaction"]
        if not dilutions:
            assert r["reaction"] is None and np.all(mult == 1.0)
            continue
        reacted += 1
        first = dilutions[0]["step"]
        assert r["reaction"]["step"] == first
        assert (r["reaction"]["layer"], r["reaction"]["head"]) == (
            dilutions[0]["layer"],
            dilutions[0]["head"],
        )
        np.testing.assert_array_equal(mult[:first], 1.0)
        np.testing.assert_array_equal(mult[first:], cfg.reaction)
        base = next(
            b for b in runs if b["seed"] == r["seed"] and b["arm"] == "baseline"
        )
        # the baseline saw the same first dilution (identical runs until then)
        assert [e for e in base["events"] if e["event"] == "dilution"][0][
            "step"
        ] == first
    assert reacted >= 1  # the quick settings do produce a dilution to react to
    text = (out / "summary.md").read_text()
    assert "| seed | first dilution (reaction) |" in text and "mean ± sd" in text
    assert (out / "monitor.png").stat().st_size > 0
