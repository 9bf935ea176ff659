"""experiments/departure.py over seeds (issue 34 point 5): the table over seeds from
what each seed's run found."""

from __future__ import annotations

from experiments import departure


def _seed(pred, rise):
    member = {"lr": 1.0, "predicted": pred, "first_rise": rise, "own_prediction": pred}
    return {"sgd": {"t1": 400.0, "members": [member]}}


def test_the_table_over_seeds_gives_ratios_and_counts():
    text = departure.seeds_table(
        {"0": _seed(296.0, 387.0), "1": _seed(300.0, None), "2": _seed(290.0, 348.0)}
    )
    assert "seeds 0, 1, 2" in text
    row = next(line for line in text.splitlines() if line.startswith("| sgd"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:2] == ["sgd (t1=400)", "1"]
    assert cells[2] == "296 [290, 300]"
    assert cells[3] == "367.5 [348, 387] (2/3)"
    # ratios 387/296 = 1.307 and 348/290 = 1.2: median 1.25
    assert cells[4] == "1.25 [1.2, 1.31] (2/3)"
