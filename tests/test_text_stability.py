"""GD's step checked against 2/λ_max (gflow.text.stability, ``gflow text``'s
``--sharpness-checks``): the recorded λ_max is the dense Hessian's, and a large step
is warned about."""

import json

import jax
import numpy as np
import pytest

from gflow import AttentionModel
from gflow.analysis import dense_hessian
from gflow.cli import main
from gflow.dynamics import SGD
from gflow.text import (
    TextLoss,
    checked_saves,
    run_full_batch,
    stability_check,
    stability_line,
    stability_warning,
)


def test_checked_saves_spread_over_the_run():
    assert checked_saves(101, 6).tolist() == [0, 20, 40, 60, 80, 100]
    assert checked_saves(3, 6).tolist() == [0, 1, 2]
    assert checked_saves(10, 0).size == 0


@pytest.mark.slow
def test_lambda_max_equals_the_dense_hessian_eigenvalue():
    """float64: λ_max recorded at each checked save of a GD run equals the top
    eigenvalue of the dense jax.hessian there to 1e-6 relative; η·λ_max/2 is its
    ratio; a step past 1/λ_max is warned about, a small one is not."""
    rng = np.random.default_rng(0)
    windows = rng.integers(0, 5, size=(24, 5)).astype(np.int32)
    loss = TextLoss(windows, d_vocab=5)
    model = AttentionModel.init(
        d_vocab=5, d_model=3, init_scale=0.5, key=jax.random.key(1), dtype=np.float64
    )
    traj = run_full_batch(
        loss, model, optimizer=SGD(), learning_rate=0.1, steps=30, num_saves=6
    )
    check = stability_check(loss, traj, 0.1, checks=4, iters=20)
    assert check["saves"] == [0, 2, 4, 6]
    for i, lam in zip(check["saves"], check["lambda_max"]):
        oracle = np.linalg.eigvalsh(np.asarray(dense_hessian(loss, traj.snapshot(i))))
        np.testing.assert_allclose(lam, oracle[-1], rtol=1e-6)
    lams = np.asarray(check["lambda_max"])
    np.testing.assert_allclose(check["stability_ratio"], 0.1 * lams / 2)
    assert check["max_stability_ratio"] == pytest.approx(0.1 * lams.max() / 2)
    assert check["flow_proxy"] and stability_warning("gd", check) is None
    assert "η·λ_max/2" in stability_line(check)
    big = 3.0 / lams.max()  # η·λ_max = 3 > 1 at the sharpest save
    loud = stability_check(loss, traj, big, checks=4, iters=20)
    assert not loud["flow_proxy"]
    warning = stability_warning("gd", loud)
    assert warning.startswith("warning: gd: η·λ_max = ") and "\n" not in warning


@pytest.mark.slow
def test_text_command_records_lambda_max_and_warns(tmp_path, capsys):
    """``gflow text --sharpness-checks 3`` writes λ_max and η·λ_max/2 of the GD run
    into gd.json and prints them; with a large --lr it prints the warning."""
    rng = np.random.default_rng(0)
    words = ["the", "cat", "dog", "sat", "ran", "on", "mat", "a"]
    corpus = tmp_path / "story.txt"
    corpus.write_text(
        " ".join(" ".join(rng.choice(words, size=6)) + "." for _ in range(200))
    )
    base = [
        "text",
        "--corpus",
        str(corpus),
        "--vocab-size",
        "6",
        "--context",
        "4",
        "--windows",
        "32",
        "--d-model",
        "4",
        "--init-scale",
        "0.5",
        "--steps",
        "6",
        "--opt-steps",
        "0",
        "--num-saves",
        "3",
        "--num-queries",
        "1",
        "--sharpness-checks",
        "3",
        "--float64",
    ]
    assert main(["--quiet", *base, "--lr", "0.01", "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "η·λ_max/2 ≤" in out and "warning" not in out
    meta = json.loads((tmp_path / "a" / "gd.json").read_text())
    check = meta["info"]["stability"]
    assert len(check["lambda_max"]) == 3 and check["flow_proxy"]
    assert meta["stats"]["sharpness_s"] >= 0
    lam = max(check["lambda_max"])
    lr = str(4.0 / lam)  # η·λ_max ≈ 4 at the start: past the flow-proxy limit
    main(["--quiet", *base, "--lr", lr, "--out", str(tmp_path / "b")])
    assert "warning: gd: η·λ_max" in capsys.readouterr().out
