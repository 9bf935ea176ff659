"""The stage detector (gflow/stages.py) on constructed signals with known times."""

import json

import numpy as np
import pytest

from gflow.stages import Stage, detect_stages, growth, moves, turning_points
from gflow.trajectory import Trajectory

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


def _trajectory(t, *, focus=True, second_cycle=False, centres=(15, 80, 120, 250)):
    c_cond, c_focus, c_dil, c_lift = centres
    loss = H_PI + (np.log(4) - H_PI) * (1 - _sig(t, c_cond, 2.0))
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
    if second_cycle:
        # σ3 opens late; query 0 dilutes, the low-frequency queries focus on themselves
        sv[:, 2] = (
            5e-3
            * np.exp(0.02 * (t - 700).clip(0))
            / (1 + 1e-3 * np.exp(0.02 * (t - 600).clip(0)))
        )
        on_top[:, 0] -= 0.5 * _sig(t, 800, 30.0)
        self_attn[:, 1:] += 0.5 * _sig(t, 780, 30.0)[:, None]
        on_top[:, 1:] = np.minimum(on_top[:, 1:], 1 - self_attn[:, 1:] - 0.01)
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


def test_four_stages_in_order_at_the_constructed_times():
    t = np.linspace(0, 400, 801)
    stages = detect_stages(_trajectory(t), pi=PI)
    assert [s.name for s in stages] == [
        "condensation",
        "focus",
        "dilution",
        "asymmetry_lifting",
    ]
    assert all(s.cycle == 1 for s in stages)
    cond, focus, dil, lift = stages
    assert cond.t_start == 0 and 15 < cond.t_end < 25
    assert focus.t_start < 80 < focus.t_end
    assert dil.t_start < 120 < dil.t_end
    assert 100 < lift.t_start < lift.t_end
    json.dumps([s.to_dict() for s in stages])
    assert stages[1].to_dict()["stage"] == "focus" == stages[1].stage


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


def test_second_cycle_on_a_long_horizon():
    t = np.linspace(0, 1500, 1501)
    stages = detect_stages(_trajectory(t, second_cycle=True), pi=PI)
    names = [(s.name, s.cycle) for s in stages]
    assert names[:4] == [
        ("condensation", 1),
        ("focus", 1),
        ("dilution", 1),
        ("asymmetry_lifting", 1),
    ]
    assert {("focus", 2), ("dilution", 2), ("asymmetry_lifting", 2)} <= set(names)
    dil2 = next(s for s in stages if s.name == "dilution" and s.cycle == 2)
    assert dil2.t_start < 800 < dil2.t_end


def test_missing_metrics_and_bad_stage():
    t = np.linspace(0, 1, 3)
    traj = Trajectory(t=t, metrics={"loss": t}, final=None)
    with pytest.raises(ValueError, match="StageObservables"):
        detect_stages(traj)
    with pytest.raises(ValueError):
        Stage("plateau", 0.0, 1.0, 1)
    with pytest.raises(ValueError):
        Stage("focus", 2.0, 1.0, 1)
