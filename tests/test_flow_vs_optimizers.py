"""experiments/flow_vs_optimizers.py over seeds (issue 34 point 5): the stage rule on
a trajectory, and the table over seeds from what each seed found."""

from __future__ import annotations

import types

import numpy as np

from experiments import flow_vs_optimizers as fvo


def test_paper_stages_are_the_detectors_cycle_one_closed_stages():
    """The stage times are gflow.detect_stages' cycle 1 (condensation's end, the
    others' starts), each only when closed; a stage still open at the run's end
    is listed as provisional, not timed; saves after the first non-finite value
    (a diverged member) are not read; the information gate reads loss - H(pi)."""
    from tests.test_stages import DT, H_PI, PI, _exact_trajectory

    chain = types.SimpleNamespace(pi=PI, unigram_loss=H_PI)
    traj, edges = _exact_trajectory()
    st = fvo.paper_stages(traj, chain)
    assert (
        edges[("condensation", 1)][1]
        <= st["condensation"]
        < edges[("condensation", 1)][1] + DT
    )
    for name, stage in (("focus", "focus"), ("dilution", "dilution")):
        start = edges[(stage, 1)][0]
        assert start <= st[name] < start + DT, (name, st[name], start)
    lift = edges[("asymmetry_lifting", 1)][0]
    assert lift <= st["asymmetry"] < lift + DT
    assert st["provisional"] == [] and st["focus_key"] == "top"
    assert fvo.keeps_stages(st | {"collapse": None})
    # cut before the lifting closes: timed stages stay, the rest is provisional
    n = int(np.searchsorted(traj.t, 400.0))
    cut = types.SimpleNamespace(
        t=traj.t[:n], metrics={k: v[:n] for k, v in traj.metrics.items()}
    )
    short = fvo.paper_stages(cut, chain)
    assert short["condensation"] == st["condensation"]
    assert short["asymmetry"] is None and "asymmetry" in short["provisional"]
    for name in fvo.STAGES:  # a stage is timed (as on the long run) or provisional
        assert (short[name] == st[name]) != (name in short["provisional"]), name
    assert not fvo.keeps_stages(short)
    # a NaN after the cut is not read
    m = {k: np.array(v, float) for k, v in cut.metrics.items()}
    m = {
        k: np.concatenate([v, np.full((1, *v.shape[1:]), np.nan)]) for k, v in m.items()
    }
    bad = types.SimpleNamespace(t=np.append(cut.t, cut.t[-1] + DT), metrics=m)
    assert fvo.paper_stages(bad, chain) == short
    # a repeated time (a step longer than the save interval, or a diverged
    # member's stopped clock) is read once
    doubled = types.SimpleNamespace(
        t=np.repeat(traj.t, 2),
        metrics={k: np.repeat(v, 2, axis=0) for k, v in traj.metrics.items()},
    )
    assert fvo.paper_stages(doubled, chain) == st
    stuck = types.SimpleNamespace(
        t=np.append(cut.t, cut.t[-1]),
        metrics={k: np.concatenate([v, v[-1:]]) for k, v in cut.metrics.items()},
    )
    assert fvo.paper_stages(stuck, chain) == short
    # no information (loss at the unigram loss): no paper focus
    flat = dict(traj.metrics, loss=np.full(traj.t.size, H_PI))
    quiet = fvo.paper_stages(types.SimpleNamespace(t=traj.t, metrics=flat), chain)
    assert quiet["focus"] is None and quiet["dilution"] is None


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
