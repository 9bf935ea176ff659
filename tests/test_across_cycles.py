"""Sweeps over the whole cycle: each member's own sharpness against its stability
bound and its own stages (``gflow sweep --member-stages``, issue 19)."""

import json

import jax
import numpy as np

from gflow.analysis.hessian import max_eigenvalue
from gflow.cli.main import main
from gflow.problems.losses import PopulationLoss
from gflow.runs.load import load_run
from gflow.runs.sweep_run import SweepConfig


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
