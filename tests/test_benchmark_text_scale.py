"""The text-scale cost benchmark: its projection is the arithmetic it states, and
bad shapes end in a usage error."""

import pytest

from benchmarks import text_scale_cost as tsc


@pytest.mark.slow  # compiles six programs: about 5 s
def test_projection_follows_the_measured_costs():
    r = tsc.run(windows=16, vocab=40, context=4, width=4, repeats=1)
    assert set(r["rows"]) == {
        "grad",
        "grad_plain",
        "hvp",
        "hvp_plain",
        "head",
        "product",
        "grad_f32",
        "hvp_f32",
    }
    g, h = r["rows"]["grad"]["min_s"], r["rows"]["hvp"]["min_s"]
    assert all(row["min_s"] > 0 for row in r["rows"].values())
    assert r["gradients_in_budget"] == int(30 * 60 // g)
    assert r["flow_s_at_grad_cost"] == pytest.approx(tsc.FLOW_EVALS * g)
    assert r["flow_s_mixed"] == pytest.approx(tsc.FLOW_EVALS * (2 * g + 8 * h) / 18)
    assert r["hvp_over_grad"] == pytest.approx(h / g)
    assert r["grad_speedup"] == pytest.approx(r["rows"]["grad_plain"]["min_s"] / g)
    g32, h32 = r["rows"]["grad_f32"]["min_s"], r["rows"]["hvp_f32"]["min_s"]
    assert r["f32_grad_speedup"] == pytest.approx(g / g32)
    assert r["flow_s_f32"] == pytest.approx(tsc.FLOW_EVALS * (2 * g32 + 8 * h32) / 18)
    # a float32 gradient: close to the float64 one, not equal to it
    assert all(0 < e < 1e-4 for e in r["f32_relative_error"])


def test_a_shape_below_one_is_a_usage_error():
    with pytest.raises(SystemExit) as e:
        tsc.main(["--windows", "0"])
    assert e.value.code == 2
