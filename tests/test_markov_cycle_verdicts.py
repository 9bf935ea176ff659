"""experiments/markov_cycle.py's verdict rules: synthetic numbers in, verdicts out."""

from __future__ import annotations

import math

import pytest


@pytest.fixture(scope="module")
def mc():
    from experiments import markov_cycle

    return markov_cycle


def test_slope_within_two_percent_is_reproduced(mc):
    v, why = mc.verdict_slope([2.171, 2.175, 2.18], 2.176, r2s=[1.0, 0.9999, 1.0])
    assert v == mc.REPRODUCED
    assert "2%" in why


def test_slope_between_two_and_ten_percent_is_partly(mc):
    assert mc.verdict_slope([2.171, 2.30], 2.176)[0] == mc.PARTLY  # 5.7% off
    # within 2% but not linear: partly
    assert mc.verdict_slope([2.17], 2.176, r2s=[0.95])[0] == mc.PARTLY


def test_slope_beyond_ten_percent_or_missing_is_not_reproduced(mc):
    assert mc.verdict_slope([4.35], 2.176)[0] == mc.NOT  # the factor 2
    assert mc.verdict_slope([2.17, None], 2.176)[0] == mc.NOT
    assert mc.verdict_slope([2.17, math.nan], 2.176)[0] == mc.NOT


def test_linear_onsets(mc):
    assert mc.verdict_linear([1.0, 0.999, 0.995])[0] == mc.REPRODUCED
    assert mc.verdict_linear([1.0, 0.95])[0] == mc.PARTLY
    assert mc.verdict_linear([1.0, 0.5])[0] == mc.NOT
    assert mc.verdict_linear([1.0, None])[0] == mc.PARTLY  # missing in one seed
    assert mc.verdict_linear([None, None])[0] == mc.NOT


def test_plateau_loss(mc):
    h, log_d = 0.7271, math.log(4)
    gap = log_d - h
    assert mc.verdict_plateau([h + 0.005 * gap, h], h, log_d)[0] == mc.REPRODUCED
    assert mc.verdict_plateau([h + 0.03 * gap], h, log_d)[0] == mc.PARTLY
    assert mc.verdict_plateau([h - 0.2 * gap], h, log_d)[0] == mc.NOT


def test_alignment(mc):
    assert mc.verdict_alignment([0.971, 0.96])[0] == mc.REPRODUCED
    assert mc.verdict_alignment([0.971, 0.9])[0] == mc.PARTLY
    assert mc.verdict_alignment([0.5])[0] == mc.NOT


def test_no_focus(mc):
    assert mc.verdict_no_focus(0.0, False)[0] == mc.REPRODUCED
    assert mc.verdict_no_focus(0.01, False)[0] == mc.PARTLY
    assert mc.verdict_no_focus(0.0, True)[0] == mc.NOT


def test_every(mc):
    assert mc.verdict_every([[True, True], [True, True]], "x")[0] == mc.REPRODUCED
    v, why = mc.verdict_every([[True, False], [True, True]], "x")
    assert v == mc.PARTLY and "3/4" in why
    assert mc.verdict_every([[False], [False]], "x")[0] == mc.NOT


def test_cycle2(mc):
    full = ["focus", "dilution", "asymmetry_lifting"]
    assert mc.verdict_cycle2([full, full], [10.0, 9.0])[0] == mc.REPRODUCED
    assert mc.verdict_cycle2([full, full], [10.0, 2.0])[0] == mc.PARTLY  # σ₃ < 4×
    assert mc.verdict_cycle2([full, ["focus"]], [10.0, 10.0])[0] == mc.PARTLY
    assert mc.verdict_cycle2([[], []], [1.0, 1.0])[0] == mc.NOT


def test_plateau_presence(mc):
    assert mc.verdict_plateau_time(44.5, expect_plateau=True)[0] == mc.REPRODUCED
    assert mc.verdict_plateau_time(2.0, expect_plateau=False)[0] == mc.REPRODUCED
    assert mc.verdict_plateau_time(2.0, expect_plateau=True)[0] == mc.NOT
    assert mc.verdict_plateau_time(44.5, expect_plateau=False)[0] == mc.NOT


def test_mean_sd_and_format(mc):
    m, s, n = mc.mean_sd([1.0, 2.0, 3.0])
    assert (m, s, n) == (2.0, 1.0, 3)
    assert mc.fmt_ms([1.0, 2.0, 3.0], ".1f") == "2.0 ± 1.0"
    assert mc.fmt_ms([1.0, None, 3.0], ".1f") == "2.0 ± 1.4 (2/3)"
    assert mc.fmt_ms([None], ".1f") == "–"


def test_superseded_cells_quote_markov_saddle(mc):
    sad = {
        "source": "docs/markov_saddle.md",
        "plateau": {
            "predicted": "slope 1/c = 12.53; ln(1/ε)/c in brackets",
            "measured": "0.01: 20.2 (57.7); slope 12.56 (R² 1.0000), offset -37.6; "
            "over seeds 12.60 ± 0.03 (n = 5)",
            "verdict": "reproduced",
        },
        "lambda1": {
            "predicted": "Θ(δ): log-log slope 1",
            "measured": "0.0005: 3.07e-05; slope 1.012 (R² 1.0000) for δ ≤ 0.005, "
            "λ₁ ≈ 0.0671·δ^1.01",
            "verdict": "reproduced",
        },
    }
    cell = mc.superseded_cell("3", sad)
    assert cell.startswith("superseded: see markov_saddle.md §1")
    assert "12.60 ± 0.03 (n = 5) vs 1/c = 12.53: reproduced" in cell
    assert "c = 0.0798" in cell
    cell = mc.superseded_cell("e", sad)
    assert cell.startswith("superseded: see markov_saddle.md §2")
    assert "slope 1.012" in cell and "0.0671·δ^1.01" in cell
    assert mc.superseded_cell("e", {}).startswith("superseded")


def test_no_verdict_text_breaks_a_markdown_table(mc):
    h, log_d = 0.7271, math.log(4)
    texts = [
        mc.verdict_slope([2.17], 2.176, r2s=[1.0])[1],
        mc.verdict_linear([1.0, None])[1],
        mc.verdict_plateau([h], h, log_d)[1],
        mc.verdict_alignment([0.97])[1],
        mc.verdict_no_focus(0.0, False)[1],
        mc.verdict_every([[True]], "x")[1],
        mc.verdict_cycle2([["focus"]], [2.0])[1],
        mc.verdict_plateau_time(2.0, expect_plateau=False)[1],
        mc.superseded_cell("3", {}),
    ]
    assert not any("|" in x for x in texts)


def test_the_run_line_states_the_seeds_and_a_busy_machine(mc):
    line = mc.run_line("load average: 0.5", (0.5, 1.7), {"markov_cycle": 60.0}, (0, 1))
    assert "took 1.0 minutes (markov_cycle 1.0 min)" in line
    assert "init seeds 0, 1, its ablations from seed 0" in line
    assert "above 1.5 (1 and 5 minutes: 0.50, 1.70)" in line
    assert "above 1.5" not in mc.run_line("x", (0.5, 0.6), {"a": 1.0}, (0,))
