"""Every command-line option exercised for its effect (issue 18), on tiny settings.

Options are grouped so that one small run checks several; the effect of each is
checked against an independent oracle where one is cheap (the initial weights of a
seed drawn again, the loss of the saved parameters recomputed, a heavy-ball or Adam
step recomputed from the saved snapshots and the gradient). The last test is the
guard: every long option of every command must appear in some test file.
"""

import argparse
import dataclasses
import inspect
import json
import re
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gflow import PopulationLoss, parameter_distance
from gflow.cli import UsageError, build_parser, main
from gflow.runs import FlowConfig, load_run, load_trajectory, solve_flow_resumable
from gflow.runs.text import TextConfig, init_model, prepare
from gflow.text import TOKENIZERS, text_loss


def _leaves(model):
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(model, eqx.is_array))]


def _same_bits(a, b):
    la, lb = _leaves(a), _leaves(b)
    return len(la) == len(lb) and all(
        x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
        for x, y in zip(la, lb)
    )


def _snapshot(params, k):
    return jax.tree.map(lambda x: x[k] if eqx.is_array(x) else x, params)


@pytest.mark.slow  # in CI's slow run (.ci/run): keeps the default suite under 3 min
def test_flow_options(tmp_path, monkeypatch):
    """--seed --d-model --tau --rtol --atol --unfactorised --residual --float32
    --max-steps in one run (one compilation), and report --out on its directory."""
    calls = []
    solve = solve_flow_resumable

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return solve(*args, **kwargs)

    monkeypatch.setattr("gflow.runs.flow_run.solve_flow_resumable", spy)
    out = tmp_path / "run"
    argv = [
        "--quiet",
        "flow",
        "--t1",
        "2",
        "--num-saves",
        "3",
        "--segments",
        "1",
        "--init-scale",
        "0.3",
        "--seed",
        "1",
        "--d-model",
        "8",
        "--tau",
        "0.5",
        "--rtol",
        "1e-3",
        "--atol",
        "1e-5",
        "--unfactorised",
        "--residual",
        "--float32",
        "--max-steps",
        "2",
        "--out",
        str(out),
    ]
    assert main(argv) == 1  # the run stopped at its step budget
    cfg = json.loads((out / "config.json").read_text())["config"]
    assert (cfg["seed"], cfg["d_model"], cfg["tau"]) == (1, 8, 0.5)
    assert (cfg["rtol"], cfg["atol"], cfg["max_steps"]) == (1e-3, 1e-5, 2)
    assert cfg["factorised"] is False and cfg["residual"] is True
    assert cfg["x64"] is False
    # --rtol / --atol / --max-steps reach the solver; the budget stops the run
    assert [(c["rtol"], c["atol"], c["max_steps"]) for c in calls] == [(1e-3, 1e-5, 2)]
    meta = json.loads((out / "flow.json").read_text())
    assert meta["status"] == "max_steps" and meta["stats"]["num_steps"] == 2
    flow = load_run(out)["flow"]
    assert flow.status == "max_steps"
    # --d-model 8 (d = 4 tokens), --unfactorised, --residual, --tau, --float32
    assert flow.params.W_E.shape[1:] == (4, 8) and flow.final.W_E.shape == (4, 8)
    assert flow.final.W_K is None and flow.final.W_Q.shape == (8, 8)
    assert flow.final.residual is True and flow.final.tau == 0.5
    assert flow.params.W_E.dtype == np.float32 and flow.final.W_P.dtype == np.float32
    # --seed: the saved initial weights are seed 1's draw, bit for bit, not seed 2's
    # (main left float32 on, as the run had it)
    settings = dict(
        d_model=8, init_scale=0.3, tau=0.5, factorised=False, residual=True, x64=False
    )
    initial = _snapshot(flow.params, 0)
    assert _same_bits(initial, FlowConfig(seed=1, **settings).model())
    other = FlowConfig(seed=2, **settings).model()
    assert not np.array_equal(initial.W_E, other.W_E)
    # --tau and --residual change the loss: the recorded one is that of τ = 0.5 with
    # the residual; τ = 1 or no residual would give another
    loss = PopulationLoss(FlowConfig().chain())
    recorded = flow.metrics["loss"][0]
    np.testing.assert_allclose(recorded, loss(initial), rtol=1e-5)
    for changed in (
        dataclasses.replace(initial, tau=1.0),
        dataclasses.replace(initial, residual=False),
    ):
        assert abs(float(loss(changed)) - recorded) > 1e-4
    # report --out: the page goes where asked (a new folder), not into the run
    page = tmp_path / "pages" / "flow.html"
    assert main(["report", str(out), "--out", str(page)]) == 0
    assert "<img" in page.read_text() and not (out / "report.html").exists()


def _grad(model):
    loss = PopulationLoss(FlowConfig().chain())
    return eqx.filter_grad(loss)(model)


def _heavy_ball_second_step(params, lr, beta):
    """θ₂ from θ₀, θ₁ by optax's heavy ball: v₂ = g(θ₁) + β g(θ₀), θ₂ = θ₁ − η v₂."""
    p0, p1 = _snapshot(params, 0), _snapshot(params, 1)
    g0, g1 = _grad(p0), _grad(p1)
    return jax.tree.map(lambda p, a, b: p - lr * (a + beta * b), p1, g1, g0)


@pytest.mark.slow  # in CI's slow run (.ci/run): keeps the default suite under 3 min
def test_sweep_momentum_beta_threshold_init_scale_seed(tmp_path):
    out = tmp_path / "run"
    argv = [
        "--quiet",
        "sweep",
        "--optimizer",
        "momentum",
        "--beta",
        "0.5",
        "--lrs",
        "0.5,0.25",
        "--t1",
        "1",
        "--num-saves",
        "3",
        "--threshold",
        "1e-12",
        "--init-scale",
        "0.3",
        "--seed",
        "3",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    cfg = json.loads((out / "config.json").read_text())["config"]
    assert (cfg["optimizer"], cfg["beta"], cfg["threshold"]) == ("momentum", 0.5, 1e-12)
    assert (cfg["flow"]["init_scale"], cfg["flow"]["seed"]) == (0.3, 3)
    run = load_run(out)
    sweep = run["sweep"]
    assert sweep["stability_constant"] == pytest.approx(2 + 2 * 0.5)  # heavy ball
    # --threshold 1e-12: each member departs at its first save after t = 0
    assert [m["departure_time"] for m in sweep["members"]] == [0.5, 0.5]
    member = run["members"].member(0)  # η = 0.5: saves after 0, 1 and 2 steps
    np.testing.assert_allclose(member.t, [0.0, 0.5, 1.0])
    initial = _snapshot(member.params, 0)
    settings = dict(init_scale=0.3, d_model=32)
    assert _same_bits(initial, FlowConfig(seed=3, **settings).model())
    assert not np.array_equal(initial.W_E, FlowConfig(seed=0, **settings).model().W_E)
    # --optimizer momentum --beta 0.5: the second step is a heavy-ball step with β
    expected = _heavy_ball_second_step(member.params, 0.5, 0.5)
    for a, b in zip(_leaves(_snapshot(member.params, 2)), _leaves(expected)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-15)


@pytest.mark.slow  # in CI's slow run (.ci/run): keeps the default suite under 3 min
def test_sweep_adam_beta(tmp_path):
    out = tmp_path / "run"
    argv = [
        "--quiet",
        "sweep",
        "--optimizer",
        "adam",
        "--beta",
        "0.8",
        "--lrs",
        "0.02,0.01",
        "--t1",
        "0.04",
        "--num-saves",
        "3",
        "--init-scale",
        "0.3",
        "--seed",
        "3",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    run = load_run(out)
    assert run["config"]["config"]["optimizer"] == "adam"
    assert run["sweep"]["stability_constant"] == pytest.approx(3.6 / 0.2)
    member = run["members"].member(0)  # η = 0.02: saves after 0, 1 and 2 steps
    np.testing.assert_allclose(member.t, [0.0, 0.02, 0.04])
    # two Adam steps with b1 = 0.8 (optax: b2 = 0.999, eps = 1e-8), recomputed
    lr, b1, b2, eps = 0.02, 0.8, 0.999, 1e-8
    p0 = _snapshot(member.params, 0)
    g0 = _grad(p0)
    m = jax.tree.map(lambda g: (1 - b1) * g, g0)
    v = jax.tree.map(lambda g: (1 - b2) * g**2, g0)
    p1 = jax.tree.map(
        lambda p, m, v: p - lr * (m / (1 - b1)) / (jnp.sqrt(v / (1 - b2)) + eps),
        p0,
        m,
        v,
    )
    for a, b in zip(_leaves(_snapshot(member.params, 1)), _leaves(p1)):
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-12)
    g1 = _grad(_snapshot(member.params, 1))
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, g1)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g**2, v, g1)
    p2 = jax.tree.map(
        lambda p, m, v: p - lr * (m / (1 - b1**2)) / (jnp.sqrt(v / (1 - b2**2)) + eps),
        _snapshot(member.params, 1),
        m,
        v,
    )
    for a, b in zip(_leaves(_snapshot(member.params, 2)), _leaves(p2)):
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-12)


@pytest.mark.slow  # in CI's slow run (.ci/run): keeps the default suite under 3 min
def test_compare_command(tmp_path, capsys):
    out = tmp_path / "run"
    argv = [
        "--quiet",
        "compare",
        "--optimizer",
        "momentum",
        "--lr",
        "0.25",
        "--t1",
        "0.5",
        "--beta",
        "0.5",
        "--threshold",
        "1e-12",
        "--num-saves",
        "3",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    assert "compare momentum η=0.25: success" in capsys.readouterr().out
    rec = json.loads((out / "compare.json").read_text())
    assert (rec["optimizer"], rec["lr"], rec["beta"], rec["t1"]) == (
        "momentum",
        0.25,
        0.5,
        0.5,
    )
    assert rec["status"] == "success" and rec["threshold"] == 1e-12
    assert rec["departure_time"] == 0.25  # the first save after t = 0
    assert (out / "compare.png").stat().st_size > 0
    run = load_run(out)
    opt, flow = run["optimizer"], run["flow"]
    np.testing.assert_allclose(opt.t, [0.0, 0.25, 0.5])  # the clock t = kη
    np.testing.assert_allclose(flow.t, opt.t)
    assert _same_bits(_snapshot(opt.params, 0), FlowConfig().model())
    assert _same_bits(_snapshot(flow.params, 0), FlowConfig().model())
    expected = _heavy_ball_second_step(opt.params, 0.25, 0.5)
    for a, b in zip(_leaves(_snapshot(opt.params, 2)), _leaves(expected)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-18)
    dist = parameter_distance(flow, opt)
    np.testing.assert_allclose(rec["distance"]["total"], dist["total"], rtol=1e-9)
    assert rec["error"] == pytest.approx(max(dist["total"]), rel=1e-9)
    assert run["config"]["config"]["optimizer"] == "momentum"
    assert main(["report", str(out)]) == 0  # a compare directory is a run directory
    assert "compare.png" in (out / "report.html").read_text()


@pytest.mark.slow  # in CI's slow run (.ci/run): keeps the default suite under 3 min
def test_text_tokenizer_max_chars_lrs_all_positions_topk_float64(tmp_path):
    rng = np.random.default_rng(0)
    words = ["The", "cat", "Sat", "on", "the", "MAT", "a", "dog"]
    head = " ".join(" ".join(rng.choice(words, size=5)) + "." for _ in range(120))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(head + " Zebra zebra ZEBRA zebra." * 40)
    out = tmp_path / "run"
    argv = [
        "--quiet",
        "text",
        "--corpus",
        str(corpus),
        "--tokenizer",
        "word-lower",
        "--max-chars",
        str(len(head)),
        "--vocab-size",
        "6",
        "--context",
        "4",
        "--windows",
        "32",
        "--init-scale",
        "0.5",
        "--lr",
        "0.1",
        "--steps",
        "3",
        "--adam-lr",
        "0.01",
        "--adam-steps",
        "2",
        "--all-positions",
        "--topk",
        "2",
        "--float64",
        "--num-saves",
        "2",
        "--num-queries",
        "1",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    saved = json.loads((out / "config.json").read_text())
    vocab = json.loads((out / "vocab.json").read_text())
    tokens = [row["token"] for row in vocab] if isinstance(vocab, list) else list(vocab)
    # --tokenizer word-lower: one type per lower-cased word; --max-chars: no zebra
    assert "the" in tokens and "The" not in tokens and "mat" in tokens
    assert not any("zebra" in t.lower() for t in tokens)
    lower = TOKENIZERS["word-lower"]
    assert saved["n_tokens"] == len(lower(head)) < len(lower(corpus.read_text()))
    # --topk 2: the two most frequent types
    assert len(saved["top"]) == 2
    # --lr / --adam-lr: the clocks t = k·η of the two runs
    gd, adam = load_trajectory(out, name="gd"), load_trajectory(out, name="adam")
    assert gd.t[-1] == pytest.approx(3 * 0.1) and adam.t[-1] == pytest.approx(2 * 0.01)
    # --float64
    assert gd.final.W_E.dtype == np.float64 and gd.metrics["loss"].dtype == np.float64
    # --all-positions: the recorded loss is the causal loss over all positions
    cfg = saved["config"]
    cfg = TextConfig(**{**cfg, "track": tuple(cfg["track"])})
    data = prepare(cfg)
    model = init_model(cfg, len(data.vocab))
    every = text_loss(model, data.sample, all_positions=True)
    last = text_loss(model, data.sample, all_positions=False)
    np.testing.assert_allclose(gd.metrics["loss"][0], every, rtol=1e-8)
    assert abs(float(last) - float(every)) > 1e-3


def test_text_download_allows_a_hub_corpus(tmp_path, monkeypatch, capsys):
    """Without --download a hub name is refused (naming --download); with it the hub
    loader is called (stubbed here: nothing is fetched)."""
    calls = []

    def hub(name, split, max_chars):
        calls.append(name)
        raise ValueError(f"corpus {name!r}: stub, nothing is fetched in tests")

    monkeypatch.setattr("gflow.text.corpus._load_hub", hub)
    argv = ["text", "--corpus", "wikitext", "--out", str(tmp_path / "run")]
    assert main(argv) == 2
    assert "--download" in capsys.readouterr().err and calls == []
    assert main([*argv, "--download"]) == 2
    assert "stub" in capsys.readouterr().err and calls == ["wikitext"]
    assert not (tmp_path / "run").exists()


def test_debug_shows_the_traceback(capsys):
    """Without --debug a bad setting is one line and exit 2; with it the error is
    raised (a traceback)."""
    assert main(["flow", "--t1", "-1"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    with pytest.raises(UsageError, match="t1: must be > 0"):
        main(["--debug", "flow", "--t1", "-1"])
    assert capsys.readouterr().err == ""


# -- the guard -----------------------------------------------------------------------


def _long_options():
    """(command, long flag) for every option of every command (and the global ones)."""
    parser = build_parser()
    found = []

    def walk(p, command):
        nonlocal found
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, name)
            elif not isinstance(action, argparse._HelpAction):
                found += [
                    (command, flag)
                    for flag in action.option_strings
                    if flag.startswith("--")
                ]

    walk(parser, "gflow")
    return found


def test_every_option_appears_in_a_test():
    """A new option must come with a test that uses it. The fuzzer does not count (it
    tries every option with bad values only), nor does this guard's own text."""
    here = Path(__file__)
    texts = []
    for path in sorted(here.parent.glob("test*.py")):
        if path.name == "test_cli_fuzz.py":
            continue
        text = path.read_text()
        if path == here:
            for guard in (_long_options, test_every_option_appears_in_a_test):
                text = text.replace(inspect.getsource(guard), "")
        texts.append(text)
    options = _long_options()
    assert len(options) > 60 and ("flow", "--d-model") in options
    untested = [
        f"{command} {flag}"
        for command, flag in options
        if not any(re.search(rf"[\"']{re.escape(flag)}[\"'=]", t) for t in texts)
    ]
    assert not untested, f"options no test uses: {', '.join(untested)}"
