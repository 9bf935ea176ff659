"""The text stand-in block: the picks within δ, and GD's stability bound where no
affordable GD run ends within δ (t1·max λ_max/2 steps, divided by the flow's
evaluations)."""

from benchmarks.standin_text import block


def _record(gd_distances):
    return {
        "machine": {"date": "2026-12-05T00:00:00+00:00", "cpus": 2, "jax": "0"},
        "problem": "a text model",
        "t1": 400.0,
        "delta": 1e-3,
        "reference": "the default solver at rtol 1e-08",
        "reference_stats": {"grad_evals": 9000},
        "lambda_max": {"t": [0.0, 200.0, 400.0], "value": [10.0, 500.0, 300.0]},
        "flows": [
            {"rtol": 1e-3, "grad_evals": 400, "distance": 5e-3},
            {"rtol": 1e-4, "grad_evals": 1000, "distance": 4e-4},
            {"rtol": 1e-5, "grad_evals": 2500, "distance": 3e-5},
        ],
        "gd": [
            {
                "lr": 0.04 * 2**k,
                "grad_evals": 10_000 // 2**k,
                "distance": d,
                "eta_lambda_max": 20.0 * 2**k,
            }
            for k, d in enumerate(gd_distances)
        ],
        "gd_budget": 10_000,
        "gd_stability_steps": 100_000,  # 400 · 500 / 2
        "load_average_end": 1.0,
    }


def test_the_flow_pick_and_the_stability_bound():
    text = block(_record([0.5, None]))
    assert "the flow at rtol 0.0001 in 1,000 evaluations" in text
    assert "at least 100,000 steps" in text and "**100× cheaper**" in text
    assert "| GD | η = 0.08 | 5,000 | diverged | 40 |" in text
    assert "largest 500 at t = 200" in text


def test_a_gd_run_within_delta_is_compared_directly():
    text = block(_record([5e-4, 2e-3]))
    assert "GD at η = 0.04 in 10,000" in text and "**10.0× cheaper**" in text
