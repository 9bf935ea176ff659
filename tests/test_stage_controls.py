"""The counting of experiments/stage_controls.py (issue 55): Wilson and Newcombe
intervals against closed forms, the collapse check, and the matching of online
events to offline stages that docs/stage_rules.md, docs/practical_models.md and
docs/monitor_validation.md report."""

import math

import numpy as np
import pytest

from experiments import stage_controls as sc
from gflow import Stage
from gflow.dynamics import Trajectory

Z2 = 1.959963984540054**2


@pytest.mark.parametrize("n", [10, 25, 35])
def test_wilson_closed_forms(n):
    # no success: [0, z^2 / (n + z^2)]; all successes: its mirror image
    lo, hi = sc.wilson(0, n)
    assert lo == pytest.approx(0.0, abs=1e-15)
    assert hi == pytest.approx(Z2 / (n + Z2), rel=1e-12)
    lo, hi = sc.wilson(n, n)
    assert hi == pytest.approx(1.0, abs=1e-15)
    assert lo == pytest.approx(n / (n + Z2), rel=1e-12)
    # the centre of the interval is the shrunk estimate (k + z^2/2) / (n + z^2)
    lo, hi = sc.wilson(7, n)
    assert (lo + hi) / 2 == pytest.approx((7 + Z2 / 2) / (n + Z2), rel=1e-12)


def test_newcombe_is_antisymmetric_and_holds_the_difference():
    lo, hi = sc.newcombe(20, 25, 3, 25)
    lo2, hi2 = sc.newcombe(3, 25, 20, 25)
    assert (lo, hi) == pytest.approx((-hi2, -lo2), rel=1e-12)
    assert lo < 20 / 25 - 3 / 25 < hi
    # equal proportions: an interval around zero
    lo, hi = sc.newcombe(5, 25, 5, 25)
    assert lo < 0 < hi and lo == pytest.approx(-hi, rel=1e-12)


def _traj(loss, entropy):
    n = len(loss)
    return Trajectory(
        t=np.arange(n, dtype=float),
        metrics={
            "loss": np.asarray(loss, float),
            "head_entropy": np.asarray(entropy, float).reshape(n, 1, 1),
        },
        final=None,
    )


def test_collapse_and_divergence_checks():
    fine = _traj([1.0, 0.8, 0.6], [2.0, 1.0, 0.5])
    assert sc.collapsed(fine, "adamw") is None
    assert sc.collapsed(_traj([1.0, 0.8, 0.6], [2.0, 0.01, 0.5]), "adamw") == (
        "collapsed"
    )
    assert sc.collapsed(_traj([1.0, 0.8, 1.1], [2.0, 1.0, 0.5]), "adamw") == (
        "diverged"
    )
    # GD may overfit its sample (held-out loss rising): a run, not a failure
    assert sc.collapsed(_traj([1.0, 0.8, 1.1], [2.0, 0.01, 0.5]), "gd") is None
    assert sc.collapsed(_traj([1.0, math.nan, 1.1], [2.0, 1.0, 0.5]), "gd") == (
        "diverged"
    )


def _online(name, t, layer=0, head=0):
    return Stage(name, t, t, 1, layer, head)


def test_matching_allows_what_the_online_rules_cannot_report_earlier():
    t = np.arange(0.0, 10.0, 1.0)
    offline = [
        Stage("focus", 1.0, 3.0, 1, 0, 0),
        Stage("dilution", 1.5, 2.0, 1, 0, 0),  # during the focus's rise
        Stage("focus", 2.0, 3.0, 1, 1, 0),
    ]
    events = [
        _online("condensation", 0.0, -1, -1),
        _online("focus", 4.0),  # one save interval after the offline span
        _online("dilution", 4.0),  # with its focus: allowed
        _online("focus", 6.0, 1, 0),  # three intervals late: no match
        _online("dilution", 7.0, 1, 1),  # no offline stage there
    ]
    m = sc.match_paper(t, events, offline)
    assert (m["online"], m["offline"]) == (4, 3)
    assert (m["hit_online"], m["hit_offline"]) == (2, 2)
    assert m["fired"]
    # the dilution is matched only because its head's focus came at t = 4
    late = [e for e in events if (e.stage, e.layer) != ("focus", 0)]
    assert sc.match_paper(t, late, offline)["hit_online"] == 0
    s = sc.summarise([m, sc.match_paper(t, [], [])])
    assert s["precision"] == 0.5 and s["recall"] == pytest.approx(2 / 3)
    assert (s["n"], s["fired"]) == (2, 1)


def test_a_focus_held_by_the_information_gate_matches_at_the_gates_opening():
    """The online rules hold the paper's focus until the run is informative
    (the gap at least ``min_information`` below zero at ``information_saves``
    consecutive saves), so a focus reported when the gate opens matches the
    offline stage it was held for, and only from then on."""
    t = np.arange(0.0, 10.0, 1.0)
    rules = sc.StageDetector()
    gap = np.array([0.1, -0.05, 0.0, -0.03, -0.03, -0.2, -0.2, -0.2, -0.2, -0.2])
    assert sc.informed_at(t, gap, rules) == 4.0  # one dip at t = 1 is not enough
    assert sc.informed_at(t, np.full(10, -0.01), rules) == np.inf
    assert sc.informed_at(t, None, rules) == -np.inf
    offline = [Stage("focus", 1.0, 2.0, 1, 0, 0)]
    events = [_online("condensation", 0.0, -1, -1), _online("focus", 5.0)]
    assert sc.match_paper(t, events, offline)["hit_online"] == 0
    held = sc.match_paper(t, events, offline, informed=4.0)
    assert (held["hit_online"], held["hit_offline"]) == (1, 1)
    assert sc.match_paper(t, events, offline, informed=3.0)["hit_online"] == 0


def test_the_noise_floor_is_the_deepest_two_save_dip_of_the_uninformative_nulls(
    monkeypatch,
):
    """``dip``: over the ``NOISE`` controls only (the uniform-pi chain is
    informative and is not read), the deepest level the gap stays under for two
    consecutive saves, collapsed runs left out.

    Catches a one-save dip read as the floor (min of the gap, -0.09 here), the
    informative control counted (-0.30), and a collapsed run counted (-0.20)."""
    gaps = {
        # one save at -0.09, two consecutive saves at or below -0.04
        ("markov-iid", 3): [0.0, -0.09, 0.01, -0.04, -0.05, 0.0],
        ("markov-uniform", 3): [0.0, -0.30, -0.30, -0.30],
        ("tinystories-bpe-isolated-shuffled", 4): [0.0, -0.20, -0.20, 0.0],
    }

    def load(data, rung, method, seed):
        gap = gaps.get((data, seed))
        if gap is None or rung != sc.RUNGS[0] or method != "adamw":
            return None
        n = len(gap)
        entropy = np.full(n, 1.0)
        if data == "tinystories-bpe-isolated-shuffled":
            entropy[-1] = 0.01  # collapsed: left out
        traj = _traj(np.linspace(1.0, 0.5, n), entropy)
        traj.metrics["unigram_gap"] = np.asarray(gap)
        return traj

    monkeypatch.setattr(sc, "load", load)
    floor, where = sc.dip(seeds=range(6))
    assert floor == pytest.approx(0.04)
    assert "i.i.d." in where and "seed 3" in where
    assert sc.dip(seeds=range(6), saves=1)[0] == pytest.approx(0.09)


def test_tuning_tries_no_gate_under_the_noise_floor(monkeypatch):
    """``tune`` keeps the first (margin, gate) with no control firing, among the
    gates at least ``SAFETY`` times the floor: with nothing firing anywhere and a
    floor of 0.03 nats, the gate kept is the first of ``GATES`` at or above
    0.045, not the smallest.

    Catches the floor ignored (0.02 kept) and read without its safety factor
    (0.03 kept)."""
    monkeypatch.setattr(sc, "dip", lambda seeds=None: (0.03, "a run"))
    monkeypatch.setattr(
        sc,
        "cells",
        lambda seeds, rules: {("markov-iid", "r", "m"): {"n": 10, "paper": 0}},
    )
    rules, lines = sc.tune()
    want = min(g for g in sc.GATES if g >= sc.SAFETY * 0.03)
    assert rules.min_information == want and want > 0.03
    assert rules.margin == sc.MARGINS[0]
    assert len(lines) == 3  # header, rule, the one pair tried
