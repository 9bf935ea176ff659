"""Sweeps over the whole cycle: each member's own sharpness against its stability
bound and its own stages (``gflow sweep --member-stages``, issue 19)."""

import json

import jax
import numpy as np
import pytest

from gflow.analysis import max_eigenvalue
from gflow.cli import main
from gflow.problems import PopulationLoss
from gflow.runs import SweepConfig, load_run


@pytest.mark.slow
def test_member_stages_hold_each_members_sharpness_and_stages(tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["sweep", "--lrs", "1,0.5", "--t1", "200", "--num-saves", "41"]
    assert main([*argv, "--member-stages", "--out", str(out)]) == 0
    sweep = json.loads((out / "sweep.json").read_text())
    printed = capsys.readouterr().out
    run = load_run(out)["members"]
    for m, rec in enumerate(sweep["members"]):
        lam = np.asarray(rec["lambda_max"])
        assert lam.shape == (41,)
        assert rec["edge"] == 2.0 / rec["lr"]
        # the member's own sharpness at its last save, by a long Lanczos run
        cfg = SweepConfig()
        member = run.member(m)
        final = member.snapshot(len(member) - 1)
        exact, _ = max_eigenvalue(
            PopulationLoss(cfg.flow.chain()), final, key=jax.random.key(1), iters=80
        )
        np.testing.assert_allclose(lam[-1], float(exact), rtol=1e-6)
        names = [s["stage"] for s in rec["stages"]]
        assert names[:2] == ["condensation", "focus"]
        assert f"λ_max crosses {rec['edge']:.3g}" in printed
    assert "c1 f1" in printed


def test_member_analysis_does_not_change_the_members_fingerprint():
    assert (
        SweepConfig(member_analysis=True).fingerprint() == SweepConfig().fingerprint()
    )


def _record(optimizer, lr, stages, edge_time, final, central=None):
    rec = {
        "optimizer": optimizer,
        "lr": lr,
        "status": "success",
        "stages": [{"stage": s, "cycle": c} for s, c in stages],
        "edge": 2.0 / lr,
        "edge_time": edge_time,
        "departure": 10.0,
        "flow_final": final,
    }
    if central is not None:
        rec["central_final"] = central
    return rec


def test_experiment_table_gives_mean_and_sd_over_seeds_and_stage_agreement():
    from experiments import optimizers_across_cycles as exp

    flow = {"stages": [{"stage": "condensation", "cycle": 1}], "lambda_max": [0.5, 9]}
    one = [("condensation", 1), ("focus", 1)]
    seeds = [
        {
            "seed": 3,
            "flow": flow,
            "members": [_record("sgd", 1.0, one, 300.0, 0.5, 0.1)],
        },
        {
            "seed": 7,
            "flow": flow,
            "members": [_record("sgd", 1.0, one[:1], 320.0, 0.7, 0.3)],
        },
    ]
    text = exp.table(seeds, exp.Settings(t1=100.0))
    row = [line for line in text.splitlines() if line.startswith("| sgd")][0]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3] == "310 ± 14.1"  # λ_max > c/η at: mean ± sample sd
    assert cells[4] == "C1 F1"
    assert cells[5] == "1/2"  # seed 1 lost the focus
    assert cells[7] == "0.6 ± 0.141"
    assert cells[8] == "0.2 ± 0.141"
    assert text.startswith("Seeds 3, 7 of the initial weights")
    assert '"stages" is seed 3\'s list' in text
    assert "\nGradient flow: stages C1;" in text
