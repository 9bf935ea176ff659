"""experiments/markov_cycles_long.py over seeds (issue 34 point 5): each seed is its
own initial draw, and the table over seeds counts and spreads what it is given."""

from __future__ import annotations

import numpy as np

from experiments import markov_cycles_long as mcl


def test_each_seed_flows_from_its_own_initial_weights():
    cfg = mcl.Config()
    assert cfg.flow().seed == cfg.seeds[0] and len(set(cfg.seeds)) >= 5
    a, b = cfg.flow(1).model(), cfg.flow(2).model()
    assert np.abs(np.asarray(a.W_E) - np.asarray(b.W_E)).max() > 0
    assert cfg.flow(1).t1 == cfg.t1 and cfg.flow(1).solver == cfg.solver


def _summary(cycles, focus2, provisional=False):
    stages = [{"stage": "focus", "cycle": 1, "t_start": 65.0, "provisional": False}]
    if cycles == 2:
        stages.append(
            {
                "stage": "focus",
                "cycle": 2,
                "t_start": focus2,
                "provisional": provisional,
            }
        )
    return {
        "cycles": cycles,
        "stages": stages,
        "extrema": [{"t": 100.0, "value": 0.263, "kind": "min"}],
    }


def test_the_table_over_seeds_counts_the_seeds_of_each_stage():
    text = mcl.seeds_table(
        0, {0: _summary(2, 600.0), 1: _summary(2, 700.0, True), 2: _summary(1, 0)}
    )
    assert "| 1 | 2 | 1F 65 2F 700? | ↓ 100: 0.263 |" in text
    assert "| 1 | focus | 3/3 | 65 ± 0 | 65 - 65 |" in text
    assert "| 2 | focus | 2/3 | 650 ± 50 | 600 - 700 |" in text
    assert "Cycles found by t = 10 000: 2, 2, 1" in text
