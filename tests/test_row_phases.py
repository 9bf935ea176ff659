"""What a tracked attention row does (issue 16, point 3): the focus and dilution
moves of a constructed row with known centres, named by the key they concern."""

import numpy as np
import pytest

from gflow.text import describe, row_phases


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _row(t):
    """Keys 'a', '▁', 'q' (the query itself, id 2). Uniform, then focus on '▁'
    (centre 20), dilution from '▁' to an even split (centre 60), then focus on
    itself (centre 100)."""
    f, d, s = _sig((t - 20) / 2), _sig((t - 60) / 2), _sig((t - 100) / 2)
    ws = (1 / 3) + f * (0.9 - 1 / 3) - d * (0.9 - 0.45) - s * 0.4
    q = (1 / 3) - f * (1 / 3 - 0.05) + d * (0.45 - 0.05) + s * 0.4
    a = 1.0 - ws - q
    return np.stack([a, ws, q], axis=1)


def test_a_row_that_focuses_dilutes_and_refocuses_on_itself():
    t = np.linspace(0, 140, 281)
    row = _row(t)
    np.testing.assert_allclose(row.sum(axis=1), 1.0)
    phases = row_phases(t, row, ["a", "\u2581", "q"], 2)
    got = [(p["phase"], p["key"], p["self"]) for p in phases]
    assert got == [
        ("focus", "\u2581", False),
        ("dilution", "\u2581", False),
        ("focus", "q", True),
    ]
    for p, centre in zip(phases, (20, 60, 100)):
        assert p["t_start"] < centre < p["t_end"], (p, centre)
    assert phases[0]["mass_after"] > 0.85 and phases[2]["mass_after"] > 0.8
    line = describe(phases)
    assert "focus on '\u2581'" in line and "focus on itself" in line


def test_a_flat_row_has_no_move_and_nan_saves_are_dropped():
    t = np.linspace(0, 10, 11)
    row = np.full((11, 3), 1 / 3)
    assert row_phases(t, row, ["a", "b", "c"], 0) == []
    assert describe([]) == "no move"
    row2 = _row(np.linspace(0, 140, 281))
    row2[170:] = np.nan  # a diverged run (from t = 85): its later saves are NaN
    phases = row_phases(np.linspace(0, 140, 281), row2, ["a", "\u2581", "q"], 2)
    assert [p["phase"] for p in phases] == ["focus", "dilution"]


def test_bad_shapes_are_refused(unchecked):
    with pytest.raises(ValueError, match="row must be"):
        row_phases(np.arange(3.0), np.zeros((4, 2)), ["a", "b"], 0)
    with pytest.raises(ValueError, match="tokens"):
        row_phases(np.arange(3.0), np.zeros((3, 2)), ["a"], 0)


def test_a_jump_within_one_save_shows_its_whole_size():
    """A row that leaps from 0.1 to 1.0 between two saves (GD at the edge of
    stability does) reports mass_before from the save before the leap."""
    t = np.arange(10.0)
    top = np.where(t < 5, 0.1, 1.0)
    rest = (1.0 - top) / 2
    row = np.stack([top, rest, rest], axis=1)  # key 0 takes it all at t = 5
    (move,) = row_phases(t, row, ["▁", "x", "y"], query=1)
    assert move["phase"] == "focus" and move["key"] == "▁"
    assert move["t_start"] == move["t_end"] == 5.0
    assert move["mass_before"] == pytest.approx(0.45)  # the largest before it
    assert move["mass_after"] == 1.0
