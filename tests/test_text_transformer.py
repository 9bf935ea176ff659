"""``gflow text --model transformer``: the deep Transformer as the text model, end to
end, with its per-head observables."""

import json

import numpy as np
import pytest

from gflow.cli import main
from gflow.runs import load_trajectory


@pytest.mark.slow
def test_text_command_runs_a_two_layer_transformer(tmp_path, capsys):
    """--model transformer --layers 2 --heads 2: GD and Adam train a 2-layer, 2-head
    Transformer on the fixed sample; the saved runs hold its per-head observables
    ([saves, layers, heads]) and its configuration; GD's λ_max is checked."""
    rng = np.random.default_rng(0)
    words = ["the", "cat", "dog", "sat", "ran", "on", "mat", "a"]
    corpus = tmp_path / "story.txt"
    corpus.write_text(
        " ".join(" ".join(rng.choice(words, size=6)) + "." for _ in range(200))
    )
    out = tmp_path / "run"
    argv = [
        "--quiet",
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
        "--model",
        "transformer",
        "--layers",
        "2",
        "--heads",
        "2",
        "--init-scale",
        "0.3",
        "--lr",
        "0.1",
        "--steps",
        "8",
        "--opt-steps",
        "4",
        "--num-saves",
        "2",
        "--num-queries",
        "1",
        "--sharpness-checks",
        "2",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    assert "η·λ_max/2" in capsys.readouterr().out
    meta = json.loads((out / "gd.json").read_text())
    assert meta["model"]["class"] == "Transformer"
    assert meta["model"]["n_layers"] == 2 and meta["model"]["n_heads"] == 2
    assert len(meta["info"]["stability"]["lambda_max"]) == 2
    for name in ("gd", "adam"):
        traj = load_trajectory(out, name=name)
        loss = traj.metrics["loss"]
        assert np.all(np.isfinite(loss)) and loss[-1] < loss[0]
        assert traj.metrics["head_entropy"].shape == (len(traj.t), 2, 2)
        assert not (out / f"{name}_rows.npz").exists()  # no one-layer rows
    assert (out / "stages.json").exists()
    # layers or heads beyond one need the Transformer: a one-line usage error
    one_layer = [a for a in argv if a not in ("--model", "transformer")]
    assert main(one_layer) == 2
    assert "--model transformer" in capsys.readouterr().err
