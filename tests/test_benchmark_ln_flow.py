"""The LayerNorm rungs' cost benchmark (issue 57): its bound is the arithmetic it
states, its float32 gradient is a float32 copy of the float64 one, and bad
arguments end in a usage error."""

import pytest

from benchmarks import ln_flow_cost as lfc


@pytest.mark.slow  # compiles the rung's gradient, HVP and a short flow: ~30 s
def test_a_rung_reports_the_bound_it_states():
    r = lfc.rung("7 +positions", sequences=4, seed=10, t1=0.01, repeats=1)
    assert r["tsit5_evals_per_unit_t"] == pytest.approx(
        6 * r["lambda_max"] / lfc.TSIT5_STABILITY
    )
    f = r["flow"]
    assert f["status"] == "success" and f["grad_evals"] > 0
    assert f["evals_per_unit_t"] == pytest.approx(f["grad_evals"] / 0.01)
    assert 0 < r["f32_relative_error"] < 1e-4
    # init 1e-3: the embedding's spread is far below sqrt(eps)
    assert r["smallest_ln_sigma"] < 3.2e-3
    assert r["invariant_norm"] is not None and r["invariant_norm"] > 0


def test_an_unknown_rung_or_a_bad_size_is_a_usage_error():
    for argv in (["--rungs", "9 nothing"], ["--sequences", "0"], ["--t1", "0"]):
        with pytest.raises(SystemExit) as e:
            lfc.main(argv)
        assert e.value.code == 2
