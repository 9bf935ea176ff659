"""``gflow text`` end to end on small generated text, and the minibatch runner."""

import json
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gflow import AttentionModel
from gflow.cli import main
from gflow.dynamics import step_keys
from gflow.runs import load_trajectory
from gflow.text import TextLoss, WindowStream, run_minibatch, text_loss

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def _story(path: Path) -> Path:
    rng = np.random.default_rng(0)
    words = ["the", "cat", "dog", "sat", "ran", "on", "mat", "big", "red", "a"]
    p = 1.0 / np.arange(1, len(words) + 1)
    sents = [
        " ".join(rng.choice(words, size=6, p=p / p.sum())) + "." for _ in range(400)
    ]
    path.write_text(" ".join(sents))
    return path


@pytest.mark.slow  # in CI's slow run (.ci/run): keeps the default suite under 3 min
def test_text_command_writes_run_directory(tmp_path, capsys):
    corpus = _story(tmp_path / "story.txt")
    out = tmp_path / "run"
    status = main(
        [
            "--quiet",
            "text",
            "--corpus",
            str(corpus),
            "--vocab-size",
            "8",
            "--context",
            "6",
            "--windows",
            "128",
            "--steps",
            "40",
            "--adam-steps",
            "20",
            "--num-saves",
            "10",
            "--track",
            "cat",
            "--num-queries",
            "2",
            "--out",
            str(out),
        ]
    )
    assert status == 0
    cfg = json.loads((out / "config.json").read_text())
    assert "cat" in cfg["queries"] and cfg["d_vocab"] == 9
    for name in ("gd", "adam"):
        traj = load_trajectory(out, name=name)
        assert np.all(np.isfinite(traj.metrics["loss"]))
        with np.load(out / f"{name}_rows.npz") as f:
            rows, queries = f["rows"], f["queries"]
        assert rows.shape == (len(traj.t), len(queries), 9)
        np.testing.assert_allclose(rows.sum(axis=-1), 1.0, rtol=1e-5)
        assert (out / f"attention_rows_{name}.png").stat().st_size > 0
    assert (out / "text_summary.png").exists()
    gd = load_trajectory(out, name="gd")
    assert gd.metrics["loss"][-1] < gd.metrics["loss"][0]  # GD descends
    np.testing.assert_allclose(gd.t[-1], 40 * 0.25)  # the flow clock
    assert "wrote" in capsys.readouterr().out


@pytest.mark.slow  # three compilations of other loops: ~3.5 min on 2 busy cores
def test_text_command_other_paths_and_no_queries(tmp_path):
    """The flow method, minibatch Adam and the positional model run end to end;
    a run with no tracked query still writes its figures."""
    corpus = _story(tmp_path / "story.txt")
    base = [
        "--quiet",
        "text",
        "--corpus",
        str(corpus),
        "--vocab-size",
        "8",
        "--context",
        "6",
        "--windows",
        "64",
        "--num-saves",
        "4",
        "--steps",
        "8",
        "--adam-steps",
        "4",
        "--num-queries",
        "0",
    ]
    for i, extra in enumerate(
        (
            ["--method", "flow", "--track", "cat"],
            ["--adam-batch", "16"],
            ["--positional", "--track", "cat"],
        )
    ):
        out = tmp_path / f"run{i}"
        assert main([*base, *extra, "--out", str(out)]) == 0, extra
        name = "flow" if "flow" in extra else "gd"
        traj = load_trajectory(out, name=name)
        assert np.all(np.isfinite(traj.metrics["loss"]))
        assert (out / f"attention_rows_{name}.png").stat().st_size > 0
        assert (out / "attention_rows_adam.png").stat().st_size > 0


def test_text_command_errors_are_one_line(tmp_path, capsys):
    corpus = _story(tmp_path / "story.txt")
    args = ["text", "--corpus", str(corpus), "--vocab-size", "8", "--context", "6"]
    assert main([*args, "--track", "zebra", "--windows", "64"]) == 2
    assert "zebra" in capsys.readouterr().err
    assert main([*args, "--method", "euler"]) == 2
    assert main(["text", "--corpus", "wikitext"]) == 2
    err = capsys.readouterr().err
    assert "local text file" in err and err.count("\n") == 2


def test_a_corpus_that_is_not_text_is_refused_writing_nothing(
    tmp_path, capsys, monkeypatch
):
    """A binary --corpus (a NUL byte, or bytes that are not UTF-8) used to be read
    with replacement characters, trained on, and exit 0."""
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"the cat sat " * 40 + b"\x00\x01\xff" + b"on the mat " * 40)
    monkeypatch.chdir(tmp_path)  # the default --out, runs/<command>-<time>, here
    for argv in (["text", "--corpus"], ["train", "--data"]):
        for out in ([], ["--out", str(tmp_path / "new" / "run")]):
            assert main([*argv, str(binary), *out]) == 2
            err = capsys.readouterr().err
            lines = err.strip().splitlines()
            assert len(lines) == 1, err
            assert lines[0].startswith(f"gflow {argv[0]}: error: "), err
            assert str(binary) in lines[0] and "byte offset 480" in lines[0], err
            assert sorted(p.name for p in tmp_path.iterdir()) == ["model.bin"]


@pytest.mark.slow  # in CI's slow run (.ci/run): keeps the default suite under 3 min
def test_run_minibatch_matches_a_hand_loop():
    ids = np.random.default_rng(1).integers(0, 6, size=300).astype(np.int32)
    stream = WindowStream(ids, length=5, batch=16)
    model = AttentionModel.init(
        d_vocab=6, d_model=4, init_scale=0.3, key=jax.random.key(0)
    )
    eval_loss = TextLoss(jnp.asarray(stream(jax.random.key(9))))
    key = jax.random.key(2)
    traj = run_minibatch(
        eval_loss,
        model,
        optax.sgd(0.1),
        stream,
        steps=3,
        learning_rate=0.1,
        key=key,
        save_every=3,
    )
    m = model
    for k in step_keys(key, 0, 3):  # batch k is stream(fold_in(key, k))
        g = eqx.filter_grad(text_loss)(m, stream(k))
        m = jax.tree.map(lambda p, gp: p - 0.1 * gp, m, g)
    np.testing.assert_allclose(traj.final.W_E, m.W_E, rtol=1e-10)
    np.testing.assert_allclose(traj.t, [0.0, 0.3])
    np.testing.assert_allclose(traj.metrics["loss"][-1], eval_loss(m), rtol=1e-10)


@pytest.mark.slow
@pytest.mark.skipif(not DATA.is_dir(), reason="shared data not present")
@pytest.mark.parametrize(
    "corpus", ["tinystories/sample.txt", "wikitext2/valid.txt", "wikitext2/test.txt"]
)
def test_text_command_defaults_on_shared_corpora(tmp_path, corpus):
    out = tmp_path / "run"
    assert (
        main(["--quiet", "text", "--corpus", str(DATA / corpus), "--out", str(out)])
        == 0
    )
    assert (out / "attention_rows_gd.png").exists()
    assert (out / "attention_rows_adam.png").exists()


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "tinystories").exists(), reason="no shared data")
def test_subword_run_saves_its_tokenizer_and_reuses_it(tmp_path):
    """--tokenizer bpe trains on the corpus and writes tokenizer.json; a second run
    given that file (--tokenizer-file) tokenises identically without training; the
    whitespace piece and the paper's rows are tracked by default."""
    pytest.importorskip("tokenizers")
    corpus = DATA / "tinystories" / "sample.txt"
    base = [
        "--quiet",
        "text",
        "--corpus",
        str(corpus),
        "--max-chars",
        "20000",
        "--tokenizer",
        "bpe",
        "--whitespace",
        "isolated",
        "--vocab-size",
        "300",
        "--context",
        "8",
        "--windows",
        "32",
        "--steps",
        "2",
        "--adam-steps",
        "0",
        "--num-saves",
        "2",
        "--num-queries",
        "1",
    ]
    assert main([*base, "--out", str(tmp_path / "a")]) == 0
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert "\u2581" in cfg["queries"] and "the" in cfg["queries"]
    assert cfg["top"][0] == "\u2581" and cfg["unk_frequency"] == 0.0
    phases = json.loads((tmp_path / "a" / "row_phases.json").read_text())
    assert set(phases["gd"]) == set(cfg["queries"])  # one entry per tracked row
    tok = tmp_path / "a" / "tokenizer.json"
    again = [*base, "--tokenizer-file", str(tok), "--out", str(tmp_path / "b")]
    assert main(again) == 0
    for name in ("vocab.json", "tokenizer.json"):
        assert (tmp_path / "a" / name).read_text() == (
            tmp_path / "b" / name
        ).read_text()
    bad = [*base[:-2], "--tokenizer", "unigram", "--tokenizer-file", str(tok)]
    assert main([*bad, "--out", str(tmp_path / "c")]) == 2  # a bpe file, not unigram
