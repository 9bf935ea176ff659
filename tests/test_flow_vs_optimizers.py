"""experiments/flow_vs_optimizers.py over seeds (issue 34 point 5): the stage rule on
a trajectory, and the table over seeds from what each seed found."""

from __future__ import annotations

import types

import numpy as np

from experiments import flow_vs_optimizers as fvo


def test_the_stage_rule_reads_its_thresholds_in_order():
    t = np.arange(6.0)
    traj = types.SimpleNamespace(
        t=t,
        metrics={
            "loss": np.array([1.0, 0.8, 0.7, 0.7, 0.7, 0.7]),
            "attention_entropy": np.array([1.0, 0.9, 0.4, 0.3, 0.3, 0.04]),
            "attention_on_top": np.array([[0.9, 0.9]] * 4 + [[0.9, 0.4]] * 2),
            "sv_W_E": np.array([[1.0, 0.5]] * 3 + [[1.0, 0.05]] * 2 + [[1.0, 0.2]]),
        },
    )
    st = fvo.simple_stages(traj, unigram_loss=0.69)
    assert (st["condensation"], st["focus"], st["dilution"]) == (2.0, 2.0, 4.0)
    # σ₂/σ₁ > 0.1 only counts after dilution (t = 4): the lifting is at t = 5
    assert st["asymmetry"] == 5.0 and st["collapse"] == 5.0
    assert not fvo.keeps_stages(st)


def _seed(focus, collapse=None):
    stages = {s: 1.0 for s in fvo.STAGES} | {"focus": focus}
    stages |= {"collapse": collapse, "min_entropy": 0.2}
    member = {"lr": 0.5, "status": "success", "stages": stages}
    return {
        "flow": {
            "stages": {s: 1.0 for s in fvo.STAGES}
            | {"collapse": None, "min_entropy": 0.26}
        },
        "optimizers": {"sgd": {"t1": 300.0, "members": [member]}},
    }


def test_the_table_over_seeds_gives_median_range_and_counts():
    text = fvo.seeds_table({"0": _seed(80.0), "1": _seed(90.0), "2": _seed(None, 7.0)})
    assert "Seeds 0, 1, 2" in text
    row = next(line for line in text.splitlines() if line.startswith("| sgd"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:3] == ["sgd (t1=300)", "0.5", "3/3"]
    assert cells[4] == "85 [80, 90] (2/3)"  # focus
    assert cells[7] == "7 [7, 7] (1/3)" and cells[-1] == "2/3"
    flow = next(line for line in text.splitlines() if line.startswith("| flow"))
    assert flow.rstrip().endswith("| 3/3 |")
