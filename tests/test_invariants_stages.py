"""Stage rules that read the right input (issue 58, point 1: stage rules), where
the constructed-signal tests of tests/test_stages.py, test_head_observables.py and
test_online_stages.py leave a one-line bug through.
"""

import numpy as np

from gflow import Trajectory
from gflow.analysis import detect_head_stages, turning_points


def test_a_zigzags_first_move_is_confirmed_by_the_threshold_where_it_is():
    """With a threshold per index, the first move away from x[0] is confirmed by
    the threshold at the index that reaches it, not by x[0]'s: a rise of 1 under
    thresholds 10 (at 0) and 0.3 (after) is a turning point; a rise of 0.1 under
    0.01 (at 0) and 1 (after) is none.

    Catches the first move's threshold read at index 0."""
    rise = np.array([0.0, 0.5, 1.0, 0.6, 0.2])
    assert turning_points(rise, np.array([10, 0.3, 0.3, 0.3, 0.3])) == [0, 2, 4]
    small = np.array([0.0, 0.05, 0.1, 0.05, 0.0])
    assert turning_points(small, np.array([0.01, 1, 1, 1, 1])) == [0, 4]


def test_each_lifting_of_the_embedding_is_searched_after_the_last_one_ends():
    """σ₂(W_E) lifts from 250 (ending at 410) and σ₃ from 700, after a tenfold
    rise of σ₃ at 300 that lies inside σ₂'s lifting: cycle 2's lifting is σ₃'s
    escape from 700, at its closed-form edges, not the rise at 300.

    Catches the next lifting searched from the previous one's start."""
    from tests.test_head_observables import T, _head_trajectory, _lift, _sig

    traj, _ = _head_trajectory()
    sv2, lift2 = _lift(T, 250.0)
    sv3, lift3 = _lift(T, 700.0)
    sv3 = sv3 * (1.0 + 9.0 * _sig(T, 300.0, 2.0))  # inside σ₂'s lifting
    metrics = dict(
        traj.metrics,
        sv_W_E=np.stack([np.ones(T.size), sv2, sv3, np.full(T.size, 1e-3)], axis=1),
    )
    stages = detect_head_stages(Trajectory(t=T, metrics=metrics, final=None))
    lifts = {s.cycle: s for s in stages if s.name == "asymmetry_lifting"}
    for cycle, (start, end) in ((1, lift2), (2, lift3)):
        assert start <= lifts[cycle].t_start < start + 0.5, (cycle, lifts[cycle])
        assert end <= lifts[cycle].t_end < end + 0.5, (cycle, lifts[cycle])


def test_online_condensation_is_where_the_windowed_rate_falls_to_5_percent():
    """The online condensation rule measures the loss's rate of fall over the last
    two intervals (Δt = 0.25) and fires once it is at most 5% of its peak. A loss
    falling at 0.05 per unit time until t = 20, then flat: the rate has fallen to
    5% of 0.05 first at t = 20.5 (a window wholly past the kink). With a first
    interval 0.4 steeper, the peak is that first window's 0.85 and its 5% is
    reached at t = 20.25 (rate 0.025); no earlier, since the slope's 0.05 lies
    above it.

    Catches the rate divided by the window's end time instead of its length
    (condensation at t = 10 on the first loss), and the first rate measured over
    one interval instead of two (a peak of 1.65: condensation during the slope)."""
    from tests.test_online_stages import _feed, _one, _signals

    dt = 0.25
    t = np.arange(0.0, 40.0, dt)
    for first, want in ((0.0, 20.5), (0.4, 20.25)):
        signals = _signals(t)
        signals["loss"] = 2.0 - 0.05 * np.minimum(t, 20.0)
        signals["loss"][0] += first
        det = _feed(t, signals, window=2)
        assert _one(det.events, "condensation", -1, -1).t_start == want, first
