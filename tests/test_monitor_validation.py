"""experiments/monitor_validation.py (issue 32 point 4): the matching of online
events to offline stages, precision, recall and latency on constructed event lists
with known answers, and short controls that the streaming rules must keep silent
while they report the focus of the paper's chain."""

import dataclasses

import numpy as np
import pytest

from experiments import monitor_validation as mv
from gflow.analysis import StageDetector, detect_head_stages
from gflow.monitor import load_monitor


def _event(name, t, cycle=1, layer=0, head=0, onset=None):
    """An online event as OnlineStageDetector reports it (an instant)."""
    return mv.Stage(
        name,
        t,
        t,
        cycle,
        layer,
        head,
        onset=t if onset is None else onset,
        step=0,
        signal="x",
        value=0.0,
        reference=0.0,
        threshold=0.1,
    )


def _stage(name, t0, t1, cycle=1, layer=0, head=0):
    return mv.Stage(name, t0, t1, cycle, layer, head)


#: One run's offline stages (t_last = 1500) and its online events, with the
#: answer of every pair worked out by hand in ``test_matching_by_hand``.
OFFLINE = [
    _stage("condensation", 0.0, 20.0, layer=-1, head=-1),
    _stage("focus", 70.0, 110.0),
    _stage("dilution", 90.0, 190.0),
    _stage("asymmetry_lifting", 100.0, 300.0, layer=-1, head=-1),
    _stage("asymmetry_lifting", 480.0, 1500.0),  # cut by the run's end
    _stage("focus", 700.0, 900.0, cycle=2),  # no online event: a miss
]
ONLINE = [
    _event("condensation", 22.0, layer=-1, head=-1, onset=0.0),
    _event("focus", 80.0, onset=66.0),
    _event("dilution", 191.5),  # past t_end + δ = 191: no match
    _event("asymmetry_lifting", 150.0, layer=-1, head=-1),
    _event("asymmetry_lifting", 600.0),
    _event("dilution", 620.0, cycle=2),  # no offline stage: a false event
]


def test_matching_by_hand():
    rows = mv.match_events(ONLINE, OFFLINE, t_last=1500.0, dt=1.0, window=2)
    by = {(r["kind"], r["cycle"]): r for r in rows}
    assert len(rows) == 7
    cond = by["condensation", 1]  # δ = window · dt = 2: 22 ≤ 20 + 2
    assert cond["matched"] and cond["latency"] == pytest.approx(22 / 20)
    assert cond["onset_latency"] == 0.0
    focus = by["focus", 1]
    assert focus["matched"] and focus["latency"] == pytest.approx(10 / 40)
    assert focus["onset_latency"] == pytest.approx(-4 / 40)
    assert not by["dilution", 1]["matched"] and by["dilution", 1]["latency"] is None
    lift = by["lifting σ(W_E)", 1]
    assert lift["matched"] and lift["latency"] == pytest.approx(50 / 200)
    head = by["lifting σ(W_A,h)", 1]  # matched, but the run cuts the stage
    assert head["matched"] and head["complete"] is False and head["latency"] is None
    assert by["focus", 2]["t"] is None and not by["focus", 2]["matched"]
    assert by["dilution", 2]["start"] is None and not by["dilution", 2]["matched"]
    # in time order of the stage's start (the event's time where there is none)
    firsts = [r["t"] if r["start"] is None else r["start"] for r in rows]
    assert firsts == sorted(firsts)


def test_scores_by_hand():
    rows = mv.match_events(ONLINE, OFFLINE, t_last=1500.0, dt=1.0)
    sc = mv.scores(rows)
    # online 6, matched 4 (condensation, focus, both liftings); complete offline
    # stages 5 (the head's lifting is cut), matched 3
    assert (sc["online"], sc["matched_online"]) == (6, 4)
    assert (sc["offline"], sc["matched_offline"]) == (5, 3)
    assert sc["precision"] == pytest.approx(4 / 6)
    assert sc["recall"] == pytest.approx(3 / 5)
    assert sc["latency"] == pytest.approx([22 / 20, 10 / 40, 50 / 200])
    assert (sc["open"], sc["matched_open"]) == (1, 1)
    focus = mv.scores(r for r in rows if r["kind"] == "focus")
    assert (focus["precision"], focus["recall"]) == (1.0, 0.5)
    assert mv.verdicts(focus) == dict(precision=True, recall=False, latency=False)
    empty = mv.scores([])
    assert empty["precision"] is None and empty["recall"] is None
    assert mv.verdicts(empty) == dict(precision=None, recall=None, latency=None)


@pytest.mark.parametrize(
    ("t", "matched"),
    [(69.0, True), (68.9, False), (111.0, True), (111.1, False)],
)
def test_the_window_is_the_stage_plus_one_interval(t, matched):
    rows = mv.match_events(
        [_event("focus", t)], [_stage("focus", 70.0, 110.0)], t_last=200.0, dt=1.0
    )
    assert rows[0]["matched"] is matched


def test_two_events_of_one_key_are_refused():
    with pytest.raises(ValueError, match="two online events"):
        mv.match_events(
            [_event("focus", 1.0), _event("focus", 2.0)], [], t_last=9.0, dt=1.0
        )


def test_flow_stages_become_the_heads_and_the_global_ones():
    flow = [
        mv.Stage("condensation", 0.0, 17.0, 1),
        mv.Stage("focus", 62.0, 94.0, 1),
        mv.Stage("asymmetry_lifting", 124.0, 338.0, 1),
    ]
    mapped = mv.as_head_stages(flow)
    assert [(s.layer, s.head) for s in mapped] == [(-1, -1), (0, 0), (-1, -1)]
    assert [mv.kind_of(s) for s in mapped] == [
        "condensation",
        "focus",
        "lifting σ(W_E)",
    ]


def test_kind_table_judges_each_kind_over_its_cycles():
    rows = mv.match_events(ONLINE, OFFLINE, t_last=1500.0, dt=1.0)
    table = mv.kind_table([dict(r, seed=0) for r in rows])
    focus_all = [line for line in table.splitlines() if "| all |" in line][0]
    assert "1/1 = 1.00" in focus_all and "1/2 = 0.50" in focus_all
    assert "R **fails**" in focus_all and "latency **fails**" in focus_all


def _short(case: str, tmp_path, t1=120.0):
    cfg = dataclasses.replace(mv.Config(), t1=t1)
    out = tmp_path / case
    mv.simulate(mv.CASES[case], 0, cfg, out)
    traj = load_monitor(out)[0]
    return traj, mv.replay(traj, StageDetector(min_amplitude=0.05), cfg.window)


@pytest.mark.slow  # ~20 s on 2 cores: three short GD runs with the monitor
def test_controls_stay_silent_where_the_chain_focuses(tmp_path):
    traj, events = _short("markov", tmp_path)
    focus = [e for e in events if e.stage == "focus"]
    assert len(focus) == 1 and 70 <= focus[0].t_start <= 100  # the flow's [62, 94]
    assert any(s.stage == "focus" for s in detect_head_stages(traj))
    for case in ("uniform_pi", "shuffled_chain"):
        traj, events = _short(case, tmp_path)
        assert not [e for e in events if e.stage in ("focus", "dilution")], case
        margins = mv.control_margins(traj)
        assert margins["entropy_fall"] < 1e-3, (case, margins)
    # the shuffled chain condenses, so its head rules were open and listening
    assert [e.stage for e in events] == ["condensation"]


@pytest.mark.slow  # 3.3 s; .ci/run runs it (the online controls are also
# counted on the ladder by tests/test_practical_ladder.py)
def test_a_short_uniform_pi_run_reports_nothing(tmp_path):
    traj, events = _short("uniform_pi", tmp_path, t1=25.0)
    assert events == []
    assert np.ptp(np.asarray(traj.metrics["loss"])) < 1e-6  # nothing escapes
