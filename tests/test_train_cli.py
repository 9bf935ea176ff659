"""``gflow train``: a deep Transformer's run directory, its options, resume, errors."""

import json
import os

import numpy as np
import pytest

from gflow import load_run, write_report
from gflow.cli import main
from gflow.problems import Transformer

SMALL = [
    "--steps",
    "8",
    "--num-saves",
    "5",
    "--segments",
    "2",
    "--seq-len",
    "6",
    "--batch",
    "4",
    "--eval-batch",
    "8",
    "--d-model",
    "4",
    "--layers",
    "2",
    "--heads",
    "2",
]
ALL_ON = [
    "--d-ff",
    "6",
    "--value",
    "--layernorm",
    "--residual",
    "--max-len",
    "8",
    "--init-scale",
    "0.3",
    "--seed",
    "3",
]


def _metrics(run_dir):
    with np.load(run_dir / "train_metrics.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def adamw_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("train") / "run"
    argv = [
        "--quiet",
        "train",
        *SMALL,
        *ALL_ON,
        "--optimizer",
        "adamw",
        "--lr",
        "0.01",
        "--schedule",
        "warmup-cosine",
        "--warmup",
        "0.25",
        "--weight-decay",
        "0.1",
        "--beta",
        "0.8",
        "--float64",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    return out


@pytest.mark.slow
def test_run_directory_holds_a_deep_model_and_per_head_stages(adamw_run):
    names = {p.name for p in adamw_run.iterdir()}
    assert {
        "config.json",
        "train.json",
        "train_metrics.npz",
        "train_params.eqx",
        "stages.json",
        "loss.png",
        "head_entropy.png",
        "attention.png",
    } <= names
    cfg = json.loads((adamw_run / "config.json").read_text())
    assert cfg["command"] == "train" and cfg["config"]["weight_decay"] == 0.1
    assert cfg["config"]["beta"] == 0.8 and cfg["config"]["warmup"] == 0.25
    run = load_run(adamw_run)
    traj = run["train"]
    model = traj.final
    assert isinstance(model, Transformer)
    assert (model.n_layers, model.n_heads) == (2, 2)
    block = model.blocks[1]
    assert block.mlp.W_in.shape == (4, 6) and block.W_V is not None
    assert model.W_pos.shape == (8, 4) and model.ln_final is not None
    assert model.residual and model.W_E.dtype == np.float64
    # 8 steps in 2 segments of 4, saved every 2: t on the warmup-cosine clock
    assert len(traj) == 5 and traj.params.W_E.shape == (5, 4, 4)
    eta = np.diff(traj.t)
    assert eta[0] < eta[1] and eta[-1] < eta[1]  # warm up, then decay
    assert traj.metrics["head_entropy"].shape == (5, 2, 2)
    stages = json.loads((adamw_run / "stages.json").read_text())
    assert all({"stage", "layer", "head", "t_start", "t_end"} <= set(s) for s in stages)
    assert "<h2>Stages</h2>" in write_report(adamw_run).read_text()


@pytest.mark.slow
def test_killed_run_resumes_bit_for_bit(adamw_run, tmp_path, capsys):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(adamw_run, out)
    for name in os.listdir(out):  # as if killed after the first segment
        if name.startswith("train") or name == "stages.json":
            os.remove(out / name)
    (out / "checkpoint" / "segment-001.npz").unlink()
    assert main(["--quiet", "train", "--resume", str(out)]) == 0
    assert "1 segment(s) resumed" in capsys.readouterr().out
    before, after = _metrics(adamw_run), _metrics(out)
    assert before.keys() == after.keys()
    for k in before:
        np.testing.assert_array_equal(before[k], after[k], err_msg=k)


@pytest.mark.slow
def test_optimizer_and_schedule_change_the_run(tmp_path):
    runs = {}
    for name, extra in {
        "sgd": ["--optimizer", "sgd", "--lr", "0.5"],
        "momentum": [
            "--optimizer",
            "momentum",
            "--lr",
            "0.5",
            "--schedule",
            "constant",
        ],
        "adam": ["--optimizer", "adam", "--lr", "0.05"],
    }.items():
        out = tmp_path / name
        assert main(["--quiet", "train", *SMALL, *extra, "--out", str(out)]) == 0
        runs[name] = load_run(out)["train"]
    # the clock: constant step sizes sum to k·η
    np.testing.assert_allclose(runs["sgd"].t, 0.5 * np.arange(0, 10, 2), rtol=1e-6)
    losses = [r.metrics["loss"][-1] for r in runs.values()]
    assert len(set(np.round(losses, 6))) == 3  # three different runs
    assert all(r.metrics["loss"][-1] < r.metrics["loss"][0] for r in runs.values())


@pytest.mark.slow
def test_text_data(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(" ".join(["the cat sat on the mat and the dog ran"] * 40))
    out = tmp_path / "run"
    argv = [
        "--quiet",
        "train",
        *SMALL,
        "--data",
        str(corpus),
        "--vocab-size",
        "5",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["d_vocab"] == 6 and "unigram_loss" in cfg["references"]  # 5 + <unk>
    assert load_run(out)["train"].final.d_vocab == 6


@pytest.mark.slow  # in CI's slow steps (.ci/run): keeps the default suite near 3 min
@pytest.mark.parametrize("whitespace", ["isolated", "prefix"])
def test_a_gpt_block_trains_on_a_bpe_vocabulary(tmp_path, whitespace):
    """Residual, pre-LayerNorm, value/output, MLP and positions on subword pieces
    trained from the corpus, in both whitespace modes; the trained tokeniser is
    saved beside the run and cuts the corpus into the run's vocabulary."""
    from gflow.text import SubwordTokenizer

    pytest.importorskip("tokenizers")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(" ".join(["the cat sat on the mat and the dog ran"] * 40))
    out = tmp_path / "run"
    argv = [
        "--quiet",
        "train",
        *SMALL,
        *ALL_ON,
        "--data",
        str(corpus),
        "--tokenizer",
        "bpe",
        "--whitespace",
        whitespace,
        "--vocab-size",
        "40",
        "--no-figures",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["config"]["tokenizer"] == "bpe"
    tok = SubwordTokenizer.from_json((out / "tokenizer.json").read_text())
    assert tok.whitespace == whitespace and tok.vocab_size <= 40
    pieces = tok("the cat")
    assert ("▁" in pieces) == (whitespace == "isolated")  # ▁ alone, or glued
    final = load_run(out)["train"].final
    assert final.d_vocab == cfg["d_vocab"] <= 41 and final.residual


def test_a_bpe_setting_at_its_default_keeps_old_fingerprints():
    """tokenizer and whitespace joined TrainConfig later: at their defaults they
    are left out of the checkpoint fingerprint, so earlier runs still resume."""
    from gflow.runs.train import LATER_SETTINGS, TrainConfig

    fields = TrainConfig().to_json()
    assert LATER_SETTINGS == {k: fields[k] for k in LATER_SETTINGS}


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--tokenizer", "wordpiece"], "tokenizer"),
        (["--tokenizer", "bpe", "--vocab-size", "8"], "vocab_size"),
        (["--whitespace", "glued"], "whitespace"),
        (["--heads", "3"], "d_model"),
        (["--data", "no/such/file.txt"], "data"),
        (["--optimizer", "lion"], "optimizer"),
        (["--schedule", "step"], "schedule"),
        (["--max-len", "3"], "max_len"),
        (["--segments", "9"], "segments"),
        (["--model", "attention"], "model"),  # SMALL's two layers and heads
        (["--population", "--method", "gd"], "population"),
        (["--method", "flow", "--schedule", "warmup-cosine"], "schedule"),
        (["--batch", "0", "--optimizer", "momentum"], "optimizer"),
        (["--method", "flow", "--solver", "euler"], "solver"),
        (["--method", "walk"], "method"),
        (["--windows", "0"], "windows"),
    ],
)
def test_bad_settings_are_one_line_exit_2(tmp_path, capsys, argv, words):
    out = tmp_path / "run"
    assert main(["--quiet", "train", *SMALL, *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert not out.exists()


@pytest.mark.slow
def test_resume_refuses_other_settings(adamw_run, capsys):
    assert main(["train", "--resume", str(adamw_run), "--steps", "9"]) == 2
    assert "drop --steps" in capsys.readouterr().err


@pytest.mark.slow  # a flow and a GD run through the command line
def test_the_population_flow_and_gd_run_from_the_command_line(tmp_path, capsys):
    """gflow train --model attention --population --method flow: the paper's flow
    as a training run, resumable, with the descended loss beside the held-out one;
    and --method gd on a fixed sample of --windows sequences of the λ = 0 chain."""
    common = ["--quiet", "train", "--model", "attention", "--d-model", "4"]
    common += ["--seq-len", "4", "--eval-batch", "8", "--num-saves", "3"]
    flow = tmp_path / "flow"
    argv = [*common, "--population", "--method", "flow", "--solver", "tsit5"]
    argv += ["--lr", "0.5", "--steps", "4", "--max-steps", "500", "--out", str(flow)]
    assert main([*argv, "--no-figures"]) == 0
    assert "train flow success: t=2" in capsys.readouterr().out
    run = load_run(flow)["train"]
    assert run.final.__class__.__name__ == "AttentionModel"
    assert run.metrics["train_loss"][-1] < run.metrics["train_loss"][0]
    cfg = json.loads((flow / "config.json").read_text())["config"]
    assert (cfg["population"], cfg["x64"], cfg["max_steps"]) == (True, True, 500)
    assert main(["--quiet", "train", "--resume", str(flow), "--no-figures"]) == 0
    assert "1 segment(s) resumed" in capsys.readouterr().out  # read back, not rerun
    gd = tmp_path / "gd"
    argv = [*common, "--method", "gd", "--lr", "0.5", "--steps", "4", "--lam", "0"]
    assert main([*argv, "--windows", "16", "--pi", "0.5,0.5", "--out", str(gd)]) == 0
    cfg = json.loads((gd / "config.json").read_text())
    assert (cfg["config"]["windows"], cfg["config"]["lam"], cfg["d_vocab"]) == (
        16,
        0,
        2,
    )
