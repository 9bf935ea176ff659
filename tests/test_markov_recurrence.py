"""experiments/markov_recurrence.py (issue 34 point 1): the geometric π with the
paper's dynamic range, the focus/dilution overlap, and the table's counts."""

from __future__ import annotations

import numpy as np
import pytest

from experiments import markov_recurrence as mr
from gflow.problems import MarkovChain


@pytest.mark.parametrize("d", [4, 8, 16])
def test_geometric_pi_has_the_papers_range_and_a_valid_chain(d):
    pi = np.asarray(mr.geometric_pi(d, 0.01 / 0.75))
    assert pi.shape == (d,) and pi.sum() == pytest.approx(1.0, abs=1e-15)
    assert pi[-1] / pi[0] == pytest.approx(0.01 / 0.75, rel=1e-12)
    ratios = pi[1:] / pi[:-1]
    np.testing.assert_allclose(ratios, ratios[0], rtol=1e-12)  # geometric
    MarkovChain.from_lambda(pi=pi, lam=0.5)  # accepted as the flow's chain
    with pytest.raises(ValueError, match="spread"):
        mr.geometric_pi(d, 1.5)


def test_overlap_is_the_shared_fraction_of_the_shorter_span():
    def span(a, b):
        return {"t_start": a, "t_end": b}

    assert mr.overlap(span(0, 10), span(20, 30)) == 0.0
    assert mr.overlap(span(0, 10), span(5, 30)) == pytest.approx(0.5)
    assert mr.overlap(span(0, 100), span(10, 20)) == pytest.approx(1.0)


def test_the_table_counts_cycles_with_distinct_focus_and_dilution():
    def found(d, seed, shares):
        return {
            "d": d,
            "seed": seed,
            "run": {"wall_s": 60.0, "load_at_start": [0.5], "status": "success"},
            "cycles": len(shares),
            "stages": [{"stage": "focus", "cycle": 1, "t_start": 65.0}],
            "per_cycle": [
                {
                    "cycle": i + 1,
                    "focus_dilution_overlap": s,
                    "distinct": s is not None and s < 0.5,
                }
                for i, s in enumerate(shares)
            ],
            "extrema": [{"t": 100.0, "value": 0.3, "kind": "min"}],
        }

    cfg = mr.Config(ds=(8,), seeds=(0, 1))
    text = mr.table(cfg, {"a": found(8, 0, [0.0, 0.9]), "b": found(8, 1, [0.1, None])})
    assert "| 8 | 2, 2 | 2 of 4 |" in text
    assert "1: yes (0.00), 2: no (0.90)" in text and "2: no focus or dilution" in text


def test_the_recurrence_verdict_counts_distinct_cycles_in_every_flow():
    from experiments import markov_cycle as mc

    assert mc.verdict_recurrence([[True, True], [True, False, True]])[0] == (
        mc.REPRODUCED
    )
    verdict, why = mc.verdict_recurrence([[True, False], [True, True]])
    assert verdict == mc.PARTLY and "1-2 in 2 flows" in why
    assert mc.verdict_recurrence([[False], [True]])[0] == mc.NOT
