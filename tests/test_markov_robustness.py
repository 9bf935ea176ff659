"""experiments/markov_robustness.py: the other chains, the summary, a --quick run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from experiments import markov_robustness as mr
from gflow.analysis import Stage
from gflow.problems import MarkovChain

PI = np.array(mr.PI)


@pytest.mark.parametrize("lam", [0.25, 0.5, 0.75])
def test_other_chains_keep_pi_and_differ_from_default(lam):
    default = MarkovChain.from_lambda(pi=PI, lam=lam).P
    chains = mr.other_chains(PI, lam=lam)
    assert len(chains) == 3
    for name, P in chains.items():
        assert np.all(P >= 0), name
        np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=0, atol=1e-12)
        np.testing.assert_allclose(PI @ P, PI, rtol=0, atol=1e-12)
        assert np.abs(P - default).max() > 0.05, name
        # the library's stationary distribution agrees, and the chain is accepted
        np.testing.assert_allclose(MarkovChain(P).pi, PI, atol=1e-12)
    mats = list(chains.values())
    for i in range(3):
        for j in range(i):
            assert np.abs(mats[i] - mats[j]).max() > 0.01


def test_metropolis_is_reversible_and_sinkhorn_is_not():
    chains = mr.other_chains(PI)
    for name in ("ring", "metropolis"):
        F = PI[:, None] * chains[name]  # detailed balance: π_i P_ij = π_j P_ji
        np.testing.assert_allclose(F, F.T, atol=1e-15)
    F = PI[:, None] * chains["sinkhorn"]
    assert np.abs(F - F.T).max() > 1e-3


def test_sinkhorn_coupling_has_both_marginals():
    F = mr.sinkhorn_coupling(PI, seed=3)
    np.testing.assert_allclose(F.sum(axis=1), PI, atol=1e-14)
    np.testing.assert_allclose(F.sum(axis=0), PI, atol=1e-14)


def test_configurations_cover_the_brief():
    cfg = mr.Config()
    confs = mr.configurations(cfg)
    # default, 3 other chains, 2 other λ, 4 other ε, and each other chain and λ
    # again at slope_eps (its plateau's slope in ln(1/ε))
    assert len(confs) == 1 + 3 + 2 + 4 + (3 + 2)
    assert confs["chain_ring_eps0.01"]["P"] == confs["chain_ring"]["P"]
    assert confs["chain_ring_eps0.01"]["eps"] == cfg.slope_eps
    assert math.isclose(max(c["eps"] for c in confs.values()), 1 / math.sqrt(32))
    assert confs["default"]["eps"] == 1e-3
    np.testing.assert_allclose(
        confs["lam_0.75"]["P"], MarkovChain.from_lambda(pi=PI, lam=0.75).P
    )


def test_summarize_mean_and_sample_sd():
    s = mr.summarize([1.0, 2.0, None, 4.0, 5.0])
    assert s["mean"] == pytest.approx(3.0)
    assert s["sd"] == pytest.approx(np.sqrt(10 / 3))  # ddof = 1
    assert (s["n"], s["total"]) == (4, 5)
    one = mr.summarize([7.0])
    assert one["mean"] == 7.0 and one["sd"] is None
    assert mr.summarize([None, None])["mean"] is None
    assert mr._fmt(s, ".1f") == "3.0 ± 1.8 (4/5)"


def _row(order, plateau, escape):
    row = {q: 1.0 for q in mr.QUANTITIES}
    row.update(order=order, plateau=plateau, escape=escape, wall_s=0.1)
    row["on_top_end"] = [1.0, 0.5, 0.25, 0.0]
    row["status"] = "success"
    return row


def test_summary_counts_k_of_5():
    cfg = mr.Config()
    conf = mr.configurations(cfg)["default"]
    orders = [True, True, False, True, False]
    plateaus = [44.0, 45.0, 3.0, 44.5, 43.0]
    escapes = [12.0, 12.5, 13.0, 12.5, 12.0]
    saved = {
        "runs": {
            f"default/seed{s}": {"spec": mr._spec(conf, s, cfg), **_row(o, p, e)}
            for s, o, p, e in zip(cfg.seeds, orders, plateaus, escapes)
        }
    }
    # a flow saved with another spec (e.g. another horizon) is not counted
    saved["runs"]["chain_ring/seed0"] = {"spec": {"t1": 1.0}, **_row(True, 50, 1)}
    summ = mr.summary(cfg, saved)
    assert list(summ) == ["default"]
    row = summ["default"]
    assert row["order"] == [3, 5]
    assert row["plateau_present"] == [4, 5]
    assert row["escape"]["mean"] == pytest.approx(np.mean(escapes))
    assert row["escape"]["sd"] == pytest.approx(np.std(escapes, ddof=1))
    assert mr._verdict(row) == "order 3/5; plateau present 4/5"
    assert [q["mean"] for q in row["on_top_end"]] == [1.0, 0.5, 0.25, 0.0]
    assert "order 3/5" in mr.table(cfg, summ)


def test_order_rule():
    def stages(c, f, d, a):
        out = [Stage("condensation", 0.0, c, 1), Stage("focus", f, f + 10, 1)]
        out += [] if d is None else [Stage("dilution", d, d + 10, 1)]
        return out + [Stage("asymmetry_lifting", a, a + 10, 1)]

    assert mr.order_holds(stages(17, 62, 92, 124))
    assert not mr.order_holds(stages(17, 62, None, 124))  # no dilution
    assert not mr.order_holds(stages(17, 62, 130, 124))  # lifting before dilution
    assert not mr.order_holds(stages(20, 10, 30, 40))  # focus before condensation ends


def test_write_docs_appends_section_once(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("# title\n\ntext\n")
    mr.write_docs(doc, "first\n")
    mr.write_docs(doc, "second\n")
    body = doc.read_text()
    assert body.startswith("# title\n\ntext\n")
    assert body.count("## Robustness (issue 13.5)") == 1
    assert "second" in body and "first" not in body
    assert body.rstrip().endswith(mr.END)


@pytest.mark.slow
def test_quick_run_writes_table_and_resumes(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("# doc\n")
    argv = ["--quick", "--write-docs", "--only", "default", "eps_0.1"]
    argv += ["--out", str(tmp_path), "--doc", str(doc), "--figures", str(tmp_path)]
    mr.main(argv)
    saved = mr.read_json(tmp_path / "results_quick.json")
    assert set(saved["runs"]) == {"default/seed0", "eps_0.1/seed0"}
    default = saved["runs"]["default/seed0"]
    assert default["order"] and default["plateau"] > 30
    # the focus onto the top token starts at 58.5-60 on the default flow, a little
    # before the entropy's fall at 62 (docs/stage_rules.md, docs/markov_cycle.md)
    assert 56 < default["focus_start"] < 64
    body = doc.read_text()
    assert "| default |" in body and "| ε = 0.1 |" in body
    assert "order 1/1; plateau present" in body
    assert (tmp_path / "markov_robustness_eps_quick.png").exists()
    assert "figures/" not in body  # the quick figure is not the doc's
    # a rerun reuses every saved flow: no new session is recorded
    mr.main(argv)
    assert len(mr.read_json(tmp_path / "results_quick.json")["sessions"]) == 1


def test_durations_fit_the_slope_in_log_one_over_eps():
    # lifting lasting 40 ln(1/ε) + seed, focus 30 whatever ε: slopes 40 and 0;
    # ε = 0.1 breaks the order in one seed, so it is left out of the fit
    cfg = mr.Config()
    confs = mr.configurations(cfg)
    saved = {"runs": {}}
    for name, conf in confs.items():
        if not (name == "default" or name.startswith("eps_")):
            continue
        e = conf["eps"]
        for s in cfg.seeds:
            lift = 40 * math.log(1 / e) + s
            row = {
                "spec": mr._spec(conf, s, cfg),
                "order": not (name == "eps_0.1" and s == 2) and e < 0.1 + 1e-9,
                "focus_start": 10.0,
                "focus_end": 40.0,
                "dilution_start": 20.0,
                "dilution_end": 20.0 + 7 * math.log(1 / e),
                "asymmetry_lifting_start": 50.0,
                "asymmetry_lifting_end": 50.0 + lift,
            }
            saved["runs"][f"{name}/seed{s}"] = row
    dur = mr.durations(cfg, saved)
    assert dur["eps"] == pytest.approx([1e-3, 1e-2, 3e-2])
    lift = dur["stages"]["asymmetry_lifting"]
    assert lift["slope"]["mean"] == pytest.approx(40.0)
    assert lift["slope"]["sd"] == pytest.approx(0.0, abs=1e-9)
    assert lift["duration"][0]["mean"] == pytest.approx(40 * math.log(1e3) + 2)
    assert dur["stages"]["focus"]["slope"]["mean"] == pytest.approx(0.0, abs=1e-9)
    line = mr.durations_line(dur)
    assert "asymmetry lifting" in line and "40.0 ± 0.0 per unit ln(1/ε) (grows)" in line
    assert (
        "focus 30 ± 0 / 30 ± 0 / 30 ± 0, slope" in line and "(about constant)" in line
    )
    assert "dilution" in line and line.count("(grows)") == 2
    assert "saddle escape" not in line  # no rate given
    # against the rank-one saddle's rate: 1/λ₁ = 40 matches the slope 40 exactly,
    # 1/λ₁ = 50 is 20% off
    rate = {"lambda1": 1 / 40, "grad_norm": 1e-13, "loss": 0.6}
    line = mr.durations_line(dur, rate)
    assert "1/λ₁ = 40.0" in line and "slope · λ₁ = 1.000 (within 5%)" in line
    line = mr.durations_line(dur, {**rate, "lambda1": 1 / 50})
    assert "slope · λ₁ = 0.800 (off by more than 5%)" in line


def test_plateau_slopes_set_each_chain_against_its_own_saddle_rate():
    # every chain's plateau lasts ln(1/ε)/c + 5 + seed, with c its saddle_rate: the
    # slope is 1/c in every seed, the ratio 1; one chain's plateau is 10% longer
    cfg = mr.Config(seeds=(0, 1))
    confs = mr.configurations(cfg)
    rates = {
        n: mr.saddle_rate(mr.MarkovChain(np.asarray(c["P"], float)))
        for n, c in confs.items()
    }
    saved = {"runs": {}}
    for name, conf in confs.items():
        for s in cfg.seeds:
            stretch = 1.1 if name.startswith("chain_ring") else 1.0
            saved["runs"][f"{name}/seed{s}"] = {
                "spec": mr._spec(conf, s, cfg),
                "plateau": stretch * math.log(1 / conf["eps"]) / rates[name] + 5 + s,
            }
    slopes = mr.plateau_slopes(cfg, saved)
    assert "default" in slopes and "chain_ring" in slopes
    assert not any("_eps" in k for k in slopes)
    for name, v in slopes.items():
        want = (1.1 if name == "chain_ring" else 1.0) / rates[name]
        assert v["slope"]["mean"] == pytest.approx(want, rel=1e-9)
        assert v["slope"]["sd"] == pytest.approx(0.0, abs=1e-9)
        assert v["c"] == pytest.approx(rates[name])
    line = mr.plateau_line(slopes, cfg)
    assert "(1.100)" in line and f"{len(slopes) - 1} of {len(slopes)} chains" in line
