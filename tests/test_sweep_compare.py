"""compare_sweep's order fit leaves out the members that are past their edge."""

import dataclasses

import equinox as eqx
import jax
import numpy as np
import optax
import pytest

from gflow.analysis import SweepComparison, compare_sweep, fit_order
from gflow.dynamics import run_sweep
from gflow.dynamics.references import FlowReference

# on the 3-token `setup` problem to t = 16, λ_max of the flow goes 0.24 → 0.57
# (0.46 from t = 12 on): GD at η = 8 and 5 (edges 2/η = 0.25, 0.4) are past their
# edges from t = 10 and 12 on, and both are 0.1 from the flow at their first step;
# the smaller steps are never past their edge
LRS = (8.0, 5.0, 0.4, 0.2, 0.1)


@pytest.fixture(scope="module")
def sweep(setup):
    loss, model = setup
    sgd = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
    return run_sweep(loss, model, sgd, LRS, t1=16.0, num_saves=9)


def members(run, idx):
    """The sweep of members ``idx`` of ``run`` only (a constructed sweep)."""
    idx = np.asarray(idx)

    def take(x):
        return x[idx] if eqx.is_array(x) or isinstance(x, np.ndarray) else x

    fields = {
        f.name: take(getattr(run, f.name))
        for f in dataclasses.fields(run)
        if f.name not in ("params", "info")
    }
    return dataclasses.replace(run, params=jax.tree.map(take, run.params), **fields)


def errors(res, idx):
    return [res["members"][m]["error"] for m in idx]


@pytest.mark.slow  # 10 s of the default run's 3 minutes; CI runs it in a slow step
def test_members_that_leave_at_their_first_step_are_left_out(setup, sweep):
    loss, model = setup
    res = compare_sweep(sweep, FlowReference(), loss, model)
    big = res["members"][:2]
    assert [m["departure_time"] for m in big] == [8.0, 5.0]  # t = η: one step
    assert not any(m["in_order_fit"] for m in big)
    assert "first save t = 8" in big[0]["excluded"]
    assert res["excluded"] == [
        {"member": m, "lr": LRS[m], "reason": big[m]["excluded"]} for m in (0, 1)
    ]
    assert res["order_members"] == [2, 3, 4]
    assert all(res["members"][m]["in_order_fit"] for m in (2, 3, 4))
    p, c = fit_order(LRS[2:], errors(res, [2, 3, 4]))
    assert (res["order"], res["intercept"]) == (p, c)
    assert res["order_reason"] is None
    # Richardson over the two smallest step sizes of the fit
    assert res["richardson"]["lrs"] == [0.2, 0.1]
    # the typed result: fields and mapping agree, unset measures are absent and
    # a misspelt one is refused where it is written
    assert isinstance(res, SweepComparison) and res.order == res["order"]
    assert res.members is res["members"] and res.sharpness is None
    assert "sharpness" not in res and res.get("sharpness") is None
    assert {"order", "intercept", "order_reason", "members"} <= set(res)
    res["stability"] = 2.0
    assert res.stability == 2.0 and res["stability"] == 2.0
    with pytest.raises(KeyError, match="not a measure"):
        res["stabilty"] = 2.0


@pytest.mark.slow  # in CI's slow steps (.ci/run): keeps the default suite near 3 min
def test_with_the_stability_constant_members_past_their_edge_are_left_out(
    setup, sweep, key
):
    loss, model = setup
    # a threshold that the first steps stay within: the edge alone decides
    kw = dict(threshold=0.5, stability=2.0, key=key)
    res = compare_sweep(sweep, FlowReference(), loss, model, **kw)
    assert res["members"][1]["departure_time"] != 5.0
    lam = res["sharpness"]["lambda_max"]
    assert lam.max() > 2 / 5 > lam[0]  # η = 5 crosses its edge on the way
    assert lam.max() < 2 / 0.4
    assert [e["member"] for e in res["excluded"]] == [0, 1]
    assert "past its edge of stability" in res["members"][1]["excluded"]
    assert "2/η = 0.4 at t = 12" in res["members"][1]["excluded"]
    assert "2/η = 0.25 at t = 10" in res["members"][0]["excluded"]
    assert res["order_members"] == [2, 3, 4]
    assert res["order"] == fit_order(LRS[2:], errors(res, [2, 3, 4]))[0]
    assert res["order"] == pytest.approx(1.0, abs=0.05)  # GD against the flow
    with pytest.raises(ValueError, match="key"):
        compare_sweep(sweep, FlowReference(), loss, model, stability=2.0)


@pytest.mark.slow  # in CI's slow steps (.ci/run): keeps the default suite near 3 min
def test_with_fewer_than_two_members_left_there_is_no_order(setup, sweep):
    loss, model = setup
    res = compare_sweep(members(sweep, [0, 4]), FlowReference(), loss, model)
    assert [m["lr"] for m in res["members"]] == [8.0, 0.1]
    assert res["order"] is None and res["intercept"] is None
    assert res["order_members"] == [1]
    assert "1 member(s)" in res["order_reason"] and "η=8:" in res["order_reason"]
    assert res["richardson"] == {"error": None, "times": 0}
