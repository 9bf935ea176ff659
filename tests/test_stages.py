"""The stage detector (analysis/stages.py) on constructed signals with known times."""

import json
from pathlib import Path

import numpy as np
import pytest

from gflow.analysis import Stage, StageDetector, detect_stages, turning_points
from gflow.dynamics import Trajectory

moves = StageDetector().moves
growth = StageDetector().growth

PI = np.array([0.75, 0.19, 0.05, 0.01])
H_PI = float(-np.sum(PI * np.log(PI)))


def _sig(t, centre, width):
    return 1.0 / (1.0 + np.exp(-(t - centre) / width))


def _attention(on_top, self_attn):
    """Rows with a given weight on token 0 and on the query itself; rest spread."""
    n = on_top.shape[0]
    a = np.zeros((n, 4, 4))
    for i in range(4):
        a[:, i, 0] = on_top[:, i]
        if i > 0:
            a[:, i, i] = self_attn[:, i]
        rest = 1.0 - a[:, i].sum(-1)
        others = [j for j in range(4) if j != 0 and j != i]
        for j in others if i > 0 else range(1, 4):
            a[:, i, j] += rest / len(others if i > 0 else range(1, 4))
    return a


def _trajectory(t, *, focus=True, centres=(15, 80, 120, 250)):
    c_cond, c_focus, c_dil, c_lift = centres
    loss = H_PI + (np.log(4) - H_PI) * (1 - _sig(t, c_cond, 2.0))
    if focus:  # the context informs: the loss falls below H(π) with focus
        loss = loss - 0.1 * _sig(t, c_focus, 5.0)
    on_top = np.tile(PI[0], (t.size, 4))
    self_attn = np.tile(PI, (t.size, 1)) * 1.0
    if focus:
        on_top[:, 0] = PI[0] + (1 - PI[0]) * _sig(t, c_focus, 5.0)
        on_top[:, 1:] = PI[0] + 0.1 * _sig(t, c_focus, 5.0)[:, None]
        on_top[:, 1:] -= 0.6 * _sig(t, c_dil, 8.0)[:, None]
    sv = np.stack(
        [
            1e-3 + 2.0 * _sig(t, c_cond, 2.0),
            7e-3 * np.exp(0.03 * (t - 100).clip(0)) / (1 + 1e-3 * np.exp(0.03 * t)),
            np.full(t.shape, 5e-3),
            np.full(t.shape, 4e-3),
        ],
        axis=1,
    )
    attn = _attention(on_top, self_attn)
    ent = np.sum(PI * -np.sum(attn * np.log(np.maximum(attn, 1e-300)), -1), -1)
    metrics = {
        "loss": loss,
        "unigram_gap": loss - H_PI,
        "attention_entropy": ent,
        "attention": attn,
        "attention_on_top": attn[:, :, 0],
        "sv_W_E": sv,
    }
    return Trajectory(t=t, metrics=metrics, final=None)


def test_turning_points_of_a_zigzag():
    x = np.array([0, 1, 2, 3, 2.9, 3.1, 2, 1, 0, 0.05, 1, 2])
    assert turning_points(x, 0.5) == [0, 5, 8, 11]
    assert turning_points(np.zeros(5), 0.5) == [0, 4]


@pytest.mark.parametrize(
    "x, points",
    [
        ([3, 2, 1, 0, 1, 2, 1.9, 0], [0, 3, 5, 7]),  # a fall first
        ([0, 0.1, -0.1, -1, 0], [0, 3, 4]),  # wiggles below the threshold
        ([0, 1, 1, 1, 0], [0, 1, 4]),  # a flat top: its first point
        ([1, 0, 0, 1], [0, 1, 3]),  # a flat bottom: its first point
        ([0, 1, 0], [0, 1, 2]),
        ([0, 1, 0.5, 0.6], [0, 1, 2, 3]),  # a turn of exactly the threshold counts
        ([1, 1.2, 1.1], [0, 2]),  # no significant move
        ([0, 0.5, 0.5, 0.0], [0, 1, 3]),  # a first move of exactly the threshold
    ],
)
def test_turning_points_edge_cases(x, points):
    assert turning_points(np.asarray(x, float), 0.5) == points


def test_moves_of_two_points_and_at_the_window_edges():
    assert moves([0.0, 1.0], [1.0, 0.0], sign=-1) == [(1.0, 1.0, 1.0)]
    t = np.arange(11.0)
    x = np.r_[np.ones(5), np.zeros(6)]  # a unit fall between t = 4 and t = 5
    assert moves(t, x, sign=-1, window=(4.0, 5.0)) == [(5.0, 5.0, 1.0)]
    assert moves(t, x, sign=-1, window=(4.5, 10.0)) == []


def test_moves_edges_of_a_logistic_fall():
    t = np.linspace(0, 100, 2001)
    x = 1 - _sig(t, 50.0, 2.0)
    ((t0, t1, amp),) = moves(t, x, sign=-1)
    # 5% and 95% of a logistic: centre ∓ width·ln(19)
    assert t0 == pytest.approx(50 - 2 * np.log(19), abs=0.1)
    assert t1 == pytest.approx(50 + 2 * np.log(19), abs=0.1)
    assert moves(t, x, sign=+1) == []


def test_growth_start_and_end_of_exponential_then_saturating():
    t = np.linspace(0, 400, 4001)
    r = 0.05
    sv = 1e-3 * np.exp(r * t) / (1 + 1e-3 * np.exp(r * t))  # saturates at t≈138
    t0, t1 = growth(t, sv)
    assert t0 == pytest.approx(np.log(2) / r, abs=1.0)
    # rate r/(1+e^{r(t-c)}) drops to r/4 at t = c + ln(3)/r, c = ln(1000)/r
    assert t1 == pytest.approx((np.log(1000) + np.log(3)) / r, abs=1.0)
    assert growth(t, np.full(t.shape, 2.0)) is None


# Exact signals: every rule's signal is a pure logistic (or exponential) with its
# own centre, so each stage edge has a closed form; the detector must land on the
# grid point at or just after it. Grid spacing DT = 0.5.
DT = 0.5
EXACT_T = np.arange(0.0, 2000.0 + DT / 2, DT)
LN19 = np.log(19.0)


def _lift(t, onset, rate=0.05, eps=1e-3):
    """σ(t) = ε e^{rx}/(1 + ε e^{rx}), x = max(t - onset, 0); its growth edges."""
    g = eps * np.exp(rate * np.clip(t - onset, 0, None))
    start = onset + np.log(2 / (1 - eps)) / rate  # ln σ up by ln 2 from its floor
    end = onset + np.log((3 + 4 * eps) / eps) / rate  # d ln σ/dt down to 1/4 peak
    return g / (1 + g), (start, end)


def _bump(t, centre, width):
    return np.exp(-(((t - centre) / width) ** 2))


def _exact_trajectory(t=EXACT_T, *, distractors=True, late_fall=False):
    """Cycle 1 and a second cycle, with the edges each rule must find.

    ``distractors`` adds moves that each rule must ignore because they lie outside
    its window: an entropy dip during condensation, a dip of the low queries'
    attention on the top token before focus, and early tenfold growths of σ₂
    (before focus) and σ₃ (before cycle 1 ends). ``late_fall`` moves cycle 1's
    dilution after the lifting, where it no longer counts.
    """
    tau_c, (c_f, w_f), (c_d, w_d) = 5.0, (80.0, 4.0), (150.0, 5.0)
    (c_f2, w_f2), (c_d2, w_d2) = (600.0, 8.0), (650.0, 8.0)
    if late_fall:
        c_d = 500.0
    # the loss falls onto H(π), then below it with focus (by 0.15 nats)
    gap = 0.5 * np.exp(-t / tau_c) - 0.15 * _sig(t, c_f, w_f)
    entropy = 1.0 - 0.7 * _sig(t, c_f, w_f)
    on_top = np.full((t.size, 4), 0.8)
    low_fall = 0.5 * _sig(t, c_d, w_d)  # low queries dilute
    # focus: the π-weighted excess on the top token rises by 0.75 × 0.2 (the top
    # query's), and the top query takes back what the low queries lose, so that
    # their moves leave the π-weighted excess alone
    top_rise = 0.2 * _sig(t, c_f, w_f)
    on_top[:, 0] = 0.75 + top_rise - 0.5 * _sig(t, c_d2, w_d2)  # cycle-2 dilution
    attn = np.zeros((t.size, 4, 4))
    for i, weight in ((1, 0.6), (2, 0.3), (3, 0.1)):  # self-attention: cycle-2 focus
        attn[:, i, i] = 0.05 + weight * _sig(t, c_f2, w_f2)
    sv2, lift1 = _lift(t, 250.0)
    sv3, lift2 = _lift(t, 700.0)
    if distractors:
        entropy -= 0.5 * _bump(t, 6.0, 1.5)
        low_fall = low_fall + 0.4 * _bump(t, 40.0, 3.0)
        sv2 = sv2 * (1.0 + 9.0 * _sig(t, 30.0, 2.0))  # a 10x rise, then a plateau
        sv3 = sv3 * (1.0 + 9.0 * _sig(t, 200.0, 2.0))  # ... before cycle 1 ends
    on_top[:, 1:] -= low_fall[:, None]
    on_top[:, 0] += low_fall * PI[1:].sum() / PI[0]
    attn[:, :, 0] = on_top
    sv = np.stack([np.ones_like(t), sv2, sv3, np.full(t.shape, 1e-3)], axis=1)
    metrics = {
        "loss": H_PI + gap,
        "unigram_gap": gap,
        "attention_entropy": entropy,
        "attention": attn,
        "attention_on_top": on_top,
        "sv_W_E": sv,
    }
    # the π-weighted self-attention of the low queries rises by 0.5 Σ w_i π_i / Σ π_i
    edges = {
        ("condensation", 1): (0.0, tau_c * np.log(20.0)),
        ("focus", 1): (c_f - w_f * LN19, c_f + w_f * LN19),
        ("dilution", 1): (c_d - w_d * LN19, c_d + w_d * LN19),
        ("asymmetry_lifting", 1): lift1,
        ("focus", 2): (c_f2 - w_f2 * LN19, c_f2 + w_f2 * LN19),
        ("dilution", 2): (c_d2 - w_d2 * LN19, c_d2 + w_d2 * LN19),
        ("asymmetry_lifting", 2): lift2,
    }
    if late_fall:
        del edges[("dilution", 1)]
    return Trajectory(t=t, metrics=metrics, final=None), edges


def _assert_edges(stages, edges):
    stages = [s for s in stages if s.is_paper_stage]
    assert [(s.name, s.cycle) for s in stages] == sorted(
        edges, key=lambda k: edges[k][0]
    )
    for s in stages:
        start, end = edges[(s.name, s.cycle)]
        # the first grid point at which the signal has covered the edge fraction
        assert start <= s.t_start + 1e-9 < start + DT + 1e-9, (s, start)
        assert end <= s.t_end + 1e-9 < end + DT + 1e-9, (s, end)


@pytest.mark.parametrize("distractors", [False, True])
def test_every_stage_edge_lands_on_the_grid_point_of_its_closed_form(distractors):
    traj, edges = _exact_trajectory(distractors=distractors)
    _assert_edges(detect_stages(traj, pi=PI), edges)


def test_cycle_one_closes_when_the_next_singular_value_rises():
    """σ₂'s lifting (and the dilution inside its cycle) is closed once σ₃ has begun
    its own escape (at 700 here), not provisional (issue 58: the rule reads the
    next singular value, σ₃, not the one it closes).

    Catches the next singular value read as σ₂ itself (column 1 for 2)."""
    traj, _ = _exact_trajectory(distractors=False)
    closed = {
        (s.name, s.cycle): not s.provisional
        for s in detect_stages(traj)
        if s.cycle == 1
    }
    assert closed[("asymmetry_lifting", 1)] and closed[("dilution", 1)]


def test_a_fall_after_the_lifting_is_no_dilution_of_cycle_one():
    traj, edges = _exact_trajectory(late_fall=True)
    _assert_edges(detect_stages(traj, pi=PI), edges)


@pytest.mark.parametrize(
    "loss, end",
    [
        ([21.0, 2.0, 1.0], 1.0),  # L - min L at exactly 5% of its initial value
        ([2.0, 1.0, 1.0, 1.0], 1.0),
        ([1.0, 1.0, 1.0], None),  # a flat loss: nothing condenses
    ],
)
def test_condensation_from_the_loss_alone(loss, end):
    traj = _flat(np.zeros(len(loss)))
    del traj.metrics["unigram_gap"]
    traj.metrics["loss"] = np.asarray(loss)
    stages = detect_stages(traj, pi=PI)
    # measured from the run's lowest loss, which a longer run may lower: provisional
    assert stages == (
        [] if end is None else [Stage("condensation", 0.0, end, 1, provisional=True)]
    )


def test_moves_finds_every_fall_after_a_rise():
    t = np.arange(9.0)
    x = np.array([0.0, 1.0, 2.0, 1.0, 0.0, 1.0, 2.0, 1.0, 0.0])
    assert moves(t, x, sign=-1) == [(3.0, 4.0, 2.0), (7.0, 8.0, 2.0)]
    assert moves(t, x, sign=+1) == [(1.0, 2.0, 2.0), (5.0, 6.0, 2.0)]


@pytest.mark.parametrize("k", [1, 2])
def test_fewer_singular_values_end_the_cycles_earlier(k):
    """With σ₁ alone nothing lifts; with σ₁, σ₂ cycle 2 has no lifting of its own
    and its focus and dilution are looked for up to the end of the run."""
    traj, edges = _exact_trajectory()
    metrics = dict(traj.metrics, sv_W_E=traj.metrics["sv_W_E"][:, :k])
    stages = detect_stages(Trajectory(t=traj.t, metrics=metrics, final=None), pi=PI)
    keep = (
        {("asymmetry_lifting", 2)}
        if k == 2
        else {
            ("asymmetry_lifting", 1),
            ("focus", 2),
            ("dilution", 2),
            ("asymmetry_lifting", 2),
        }
    )
    _assert_edges(stages, {key: v for key, v in edges.items() if key not in keep})


def test_focus_from_the_first_point_without_condensation():
    """No condensation: the focus window opens at t0, and a fall that starts there
    has covered 5% of itself one step later."""
    gap = np.zeros(21)
    traj = _flat(gap)
    traj.metrics["attention_entropy"] = 1.0 - np.arange(21) / 20  # linear fall
    stages = detect_stages(traj, pi=PI)
    # the fall is still under way at the run's last point: provisional; no key
    # class gains mass (the attention rows do not move): an entropy fall onto
    # nothing, which is not the paper's focus
    assert stages == [
        Stage("entropy_fall", 1.0, 19.0, 1, provisional=True, key="diffuse")
    ]


def test_loss_alone_gives_condensation_when_no_gap_is_recorded():
    """Without ``unigram_gap`` condensation ends when L - min L is down to 5% of its
    initial value; min L is now the level after focus, 0.15 below H(π), so the stage
    ends with focus: where 0.15 (1 - s) = 0.05 · 0.65, s the focus logistic."""
    traj, _ = _exact_trajectory()
    metrics = {k: v for k, v in traj.metrics.items() if k != "unigram_gap"}
    metrics["loss"] = metrics["loss"] + 3.0  # only the fall counts, not the level
    stages = detect_stages(Trajectory(t=traj.t, metrics=metrics, final=None), pi=PI)
    cond = stages[0]
    assert (cond.name, cond.t_start, cond.cycle) == ("condensation", 0.0, 1)
    s = 1.0 - 0.05 * 0.65 / 0.15
    end = 80.0 + 4.0 * np.log(s / (1 - s))
    assert end <= cond.t_end < end + DT


def _flat(gap, t=None):
    """A short trajectory with a given unigram gap and nothing else moving."""
    n = len(gap)
    t = np.arange(float(n)) if t is None else t
    metrics = {
        "loss": H_PI + np.asarray(gap, float),
        "unigram_gap": np.asarray(gap, float),
        "attention_entropy": np.ones(n),
        "attention": np.tile(np.eye(4), (n, 1, 1)),
        "attention_on_top": np.full((n, 4), 0.5),
        "sv_W_E": np.ones((n, 4)),
    }
    return Trajectory(t=t, metrics=metrics, final=None)


@pytest.mark.parametrize(
    "gap, end",
    [
        ([1.0, 0.5, 0.05, 0.01], 2.0),  # exactly 5% of the initial gap ends it
        ([1.0, 0.5, 0.05, 0.05], 2.0),  # ... even when it goes no lower
        ([1.0, 0.0, 0.0, 0.0], 1.0),  # the first gap alone must be positive
        ([1.0, 0.2, 0.04, 0.04], 2.0),
        ([2.0, 1.0, 0.5, 0.08], 3.0),  # 4% of an initial gap of 2
        ([1.0, 0.5, 0.2, 0.1], None),  # never down to 5%: no condensation
        ([0.0, -0.1, -0.2, -0.2], None),  # starts on the plateau
    ],
)
def test_condensation_ends_at_five_percent_of_the_initial_gap(gap, end):
    stages = detect_stages(_flat(gap), pi=PI)
    if end is None:
        assert stages == []
    else:
        assert stages == [Stage("condensation", 0.0, end, 1)]


def test_growth_on_a_nonuniform_grid_after_a_decay():
    """ln σ = ln ε + D (t_m - t)₊ + A s((t - c)/w), s the logistic, on uneven times.

    The minimum is at t_m; the growth starts where A (s - s(t_m)) = ln 2, its rate
    A s(1 - s)/w peaks at c and falls to a quarter of the peak where s = (1 + √¾)/2.
    """
    u = np.linspace(0.0, 1.0, 6001)
    t = 250.0 * (u + u**2)  # spacing from 0.04 to 0.12
    eps, D, t_m, A, c, w = 1e-3, 0.02, 100.0, np.log(100.0), 250.0, 15.0
    s = _sig(t, c, w)
    sv = eps * np.exp(D * np.clip(t_m - t, 0, None) + A * s)
    s_m = 1.0 / (1.0 + np.exp(-(t_m - c) / w))
    s0 = np.log(2.0) / A + s_m
    start = c + w * np.log(s0 / (1 - s0))
    s1 = (1 + np.sqrt(0.75)) / 2
    end = c + w * np.log(s1 / (1 - s1))
    t0, t1 = growth(t, sv)
    assert t0 == pytest.approx(start, abs=0.15)
    assert t1 == pytest.approx(end, abs=0.3)
    # after the growth has ended there is none left to find
    assert growth(t, sv, after=end + 40.0) is None


def test_growth_at_its_thresholds_on_a_few_points():
    # three points after ``after`` are enough; a 100x growth ends at the last point
    assert growth([0.0, 1.0, 2.0], [1.0, 1.0, 100.0], after=0.0) == (2.0, 2.0)
    assert growth([0.0, 1.0, 2.0], [1.0, 1.0, 100.0], after=0.5) is None
    # exactly MIN_GROWTH (4x) counts, and ln σ up by exactly ln 2 starts the stage
    assert growth([0.0, 1.0, 2.0], [1.0, 1.0, 4.0]) is not None
    assert growth([0.0, 1.0, 2.0], [1.0, 1.0, 3.9]) is None
    assert growth([0.0, 1.0, 2.0, 3.0], [1.0, 1.0, 2.0, 8.0]) == (2.0, 3.0)


def test_a_growth_is_read_up_to_the_first_value_that_is_not_finite():
    """A singular value that grows 100x and then overflows or turns NaN (a
    diverging optimizer run) is read up to its last finite value (the NaN once
    raised an IndexError in the growth's end)."""
    t = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    finite = growth(t[:4], [1.0, 1.0, 10.0, 100.0])
    assert finite == (2.0, 3.0)
    for bad in (np.nan, np.inf):
        assert growth(t, [1.0, 1.0, 10.0, 100.0, bad, 1.0]) == finite


def test_an_explicit_pi_overrides_the_first_attention_rows():
    """π read off the first attention rows has token 0 on top; an explicit π with
    token 3 on top makes the rules read other columns, so other stages come out."""
    traj, edges = _exact_trajectory()

    def names(stages):
        return [(s.name, s.cycle) for s in stages if s.is_paper_stage]

    assert names(detect_stages(traj)) == names(detect_stages(traj, pi=PI))
    reversed_pi = PI[::-1].copy()
    assert detect_stages(traj, pi=reversed_pi) != detect_stages(traj)


def test_four_stages_in_order_at_the_constructed_times():
    t = np.linspace(0, 400, 801)
    stages = detect_stages(_trajectory(t), pi=PI)
    assert [s.name for s in stages if s.is_paper_stage] == [
        "condensation",
        "focus",
        "dilution",
        "asymmetry_lifting",
    ]
    assert all(s.cycle == 1 for s in stages)
    json.dumps([s.to_dict() for s in stages])
    assert stages[1].to_dict() == {
        "stage": "focus",
        "t_start": stages[1].t_start,
        "t_end": stages[1].t_end,
        "cycle": 1,
        "key": "top",
    }
    assert stages[1].stage == "focus"


def test_detector_shifts_with_the_signals():
    t = np.linspace(0, 400, 801)
    a = detect_stages(_trajectory(t), pi=PI)
    b = detect_stages(_trajectory(t, centres=(30, 100, 140, 270)), pi=PI)
    ends = {s.name: s.t_end for s in a}
    shifted = {s.name: s.t_end for s in b}
    for name, shift in [("condensation", 15), ("focus", 20), ("dilution", 20)]:
        assert shifted[name] - ends[name] == pytest.approx(shift, abs=1)


def test_no_focus_without_an_attention_change():
    t = np.linspace(0, 400, 801)
    stages = detect_stages(_trajectory(t, focus=False), pi=PI)
    assert [s.name for s in stages] == ["condensation"]


def test_missing_metrics_and_bad_stage():
    t = np.linspace(0, 1, 3)
    traj = Trajectory(t=t, metrics={"loss": t}, final=None)
    with pytest.raises(ValueError, match="StageObservables"):
        detect_stages(traj)
    with pytest.raises(ValueError):
        Stage("plateau", 0.0, 1.0, 1)
    with pytest.raises(ValueError):
        Stage("focus", 2.0, 1.0, 1)
    assert Stage("focus", 1.0, 1.0, 1).t_end == 1.0  # a stage may take no time


#: stages.json of ``_trajectory`` on the grid linspace(0, 400, 801): the format
#: of every detector, with ``"provisional": true`` on the two stages the run ends
#: before closing (no σ₃ growth confirms that σ₂'s is over, and dilution's window
#: ends with it) and the key class of each attention move (the focus reads the
#: π-weighted excess on the top token, so it starts before the entropy falls).
FOUR_STAGES_JSON = (
    '[{"stage": "condensation", "t_start": 0.0, "t_end": 21.0, "cycle": 1}, '
    '{"stage": "focus", "t_start": 65.0, "t_end": 91.5, "cycle": 1, "key": "top"}, '
    '{"stage": "entropy_fall", "t_start": 74.5, "t_end": 89.5, "cycle": 1, '
    '"key": "top"}, '
    '{"stage": "dilution", "t_start": 101.5, "t_end": 144.0, "cycle": 1, '
    '"provisional": true, "key": "top"}, '
    '{"stage": "asymmetry_lifting", "t_start": 124.0, "t_end": 269.0, "cycle": 1, '
    '"provisional": true}]'
)


def test_stages_json_is_unchanged_and_reads_back():
    stages = detect_stages(_trajectory(np.linspace(0, 400, 801)), pi=PI)
    assert all(type(s) is Stage for s in stages)
    assert all(s.layer is s.head is s.onset is s.step is None for s in stages)
    assert json.dumps([s.to_dict() for s in stages]) == FOUR_STAGES_JSON
    assert [Stage.from_dict(d) for d in json.loads(FOUR_STAGES_JSON)] == stages
    assert [Stage.from_dict(s.to_dict()) for s in stages] == stages
    assert [s.name for s in stages] == [s.stage for s in stages]  # the old spelling


def test_one_stage_type_refuses_mixed_fields():
    with pytest.raises(ValueError, match="both be None"):
        Stage("focus", 0.0, 1.0, 1, 0)  # a layer without a head
    with pytest.raises(ValueError, match="needs all of"):
        Stage("focus", 1.0, 1.0, 1, 0, 0, onset=0.5)  # half an online event
    event = dict(onset=0.5, step=3, signal="s", value=1.0, reference=2.0)
    with pytest.raises(ValueError, match="t_start = t_end"):
        Stage("focus", 1.0, 2.0, 1, 0, 0, threshold=0.1, **event)
    with pytest.raises(ValueError, match="layer and head"):
        Stage("focus", 1.0, 1.0, 1, threshold=0.1, **event)
    e = Stage("focus", 1.0, 1.0, 1, 0, 0, threshold=0.1, **event)
    assert e.is_event and not Stage("focus", 1.0, 1.0, 1).is_event
    assert Stage.from_dict(e.to_dict()) == e
    keys = "event layer head cycle step t t_onset signal value reference threshold key"
    assert list(e.to_dict()) == keys.split()  # events.jsonl's order


def _two_phase(w2):
    """ln σ = ln ε + ln 10 s((t - 200)/20) + ln 20 s((t - 600)/w₂), s the logistic:
    a growth, a lull (rate < 1e-3 near t = 400) and a second growth whose peak rate
    is ln 20/(4 w₂). Returns ln σ and its exact rate d ln σ/dt as functions of t."""
    A1, A2 = np.log(10.0), np.log(20.0)

    def logs(t):
        return np.log(1e-3) + A1 * _sig(t, 200.0, 20.0) + A2 * _sig(t, 600.0, w2)

    def rate(t):
        s1, s2 = _sig(t, 200.0, 20.0), _sig(t, 600.0, w2)
        return A1 * s1 * (1 - s1) / 20.0 + A2 * s2 * (1 - s2) / w2

    return logs, rate


@pytest.mark.parametrize("w2, resumes", [(40.0, True), (200.0, False)])
def test_a_growth_that_resumes_after_a_lull_is_one_growth(w2, resumes):
    """The growth ends where d ln σ/dt falls below a quarter of its peak for good: a
    second phase faster than that (w₂ = 40) belongs to the growth, a slower one
    (w₂ = 200) does not. Before this rule the first case ended at the lull. The
    edges are the roots of the exact ln σ and rate."""
    from scipy.optimize import brentq

    logs, rate = _two_phase(w2)
    t = np.linspace(0.0, 1200.0, 24001)
    t0, t1 = growth(t, np.exp(logs(t)))
    start = brentq(lambda x: logs(x) - logs(0.0) - np.log(2.0), 0.0, 200.0)
    quarter = 0.25 * rate(t).max()
    lo = 640.0 if resumes else 220.0  # past the peak of the phase that ends it
    end = brentq(lambda x: rate(x) - quarter, lo, lo + 300.0)
    assert t0 == pytest.approx(start, abs=0.06)
    assert t1 == pytest.approx(end, abs=0.2)
    assert (t1 > 600.0) == resumes


def _long_flow():
    """The default flow to t1 = 10000 at the 401 saved times of
    ``gflow flow --t1 10000 --solver stiff --num-saves 2001`` (every 5th kept, i.e.
    the default grid of ``--t1 10000``); the observables detect_stages reads."""
    data = np.load(Path(__file__).parent / "data" / "markov_flow_t10000.npz")
    metrics = {k: data[k] for k in data.files if k != "t"}
    return Trajectory(t=data["t"], metrics=metrics, final=None)


def test_the_default_flow_to_t10000_has_a_complete_ordered_second_cycle():
    traj = _long_flow()
    stages = detect_stages(traj, pi=PI)
    by = {(s.name, s.cycle): s for s in stages}
    assert sorted({s.cycle for s in stages}) == [1, 2]  # no partial third cycle
    two = [s for s in stages if s.cycle == 2 and s.is_paper_stage]
    assert [s.name for s in two] == ["focus", "dilution", "asymmetry_lifting"]
    lift1 = by[("asymmetry_lifting", 1)]
    assert all(s.t_start >= lift1.t_end for s in two)
    assert [s.t_start for s in two] == sorted(s.t_start for s in two)
    assert two[0].t_end < two[1].t_end < two[2].t_end
    # the lifting of cycle 2 lasts until σ₃(W_E) is O(1), not just its first phase
    sv3 = traj.metrics["sv_W_E"][:, 2]
    i_end = int(np.searchsorted(traj.t, two[2].t_end))
    assert sv3[i_end] > 0.75 * sv3[-1] > 1.0
    got = [(s.name, s.cycle, s.t_start, s.t_end) for s in stages if s.is_paper_stage]
    assert got == [
        ("condensation", 1, 0.0, 25.0),
        ("focus", 1, 75.0, 100.0),
        ("dilution", 1, 100.0, 150.0),
        ("asymmetry_lifting", 1, 125.0, 350.0),
        ("focus", 2, 625.0, 1750.0),
        ("dilution", 2, 650.0, 4725.0),
        ("asymmetry_lifting", 2, 750.0, 4925.0),
    ]


@pytest.mark.slow
def test_gflow_flow_to_t10000_writes_a_complete_second_cycle(tmp_path):
    """Issue 13's done-when: ``gflow flow --t1 10000`` (default solver and grid)
    writes cycle 2's three stages into stages.json, at the fixture's times; and the
    paper's figures."""
    from gflow.cli import main

    out = tmp_path / "run"
    assert main(["--quiet", "flow", "--t1", "10000", "--out", str(out)]) == 0
    stages = json.loads((out / "stages.json").read_text())
    expected = detect_stages(_long_flow(), pi=PI)
    assert [(s["stage"], s["cycle"]) for s in stages] == [
        (s.name, s.cycle) for s in expected
    ]
    for got, want in zip(stages, expected):
        assert got["t_start"] == pytest.approx(want.t_start, abs=25.0)
        assert got["t_end"] == pytest.approx(want.t_end, abs=25.0)
    for name in ("entropy", "attention", "singular_values", "pca", "row_norms"):
        assert (out / f"paper_{name}.png").stat().st_size > 0


def test_the_one_layer_focus_needs_the_loss_below_the_unigram_loss():
    """The same attention moves with a loss that stays on H(π) (the context carries
    nothing): no paper stage after condensation; the entropy fall is still named."""
    t = np.linspace(0, 400, 801)
    traj = _trajectory(t)
    loss = H_PI + (np.log(4) - H_PI) * (1 - _sig(t, 15, 2.0))
    metrics = dict(traj.metrics, loss=loss, unigram_gap=loss - H_PI)
    stages = detect_stages(Trajectory(t=t, metrics=metrics, final=None), pi=PI)
    assert [s.name for s in stages] == ["condensation", "entropy_fall"]
