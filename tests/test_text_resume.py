"""``gflow text --resume``: an interrupted text run continues from the runs that had
finished (read back, not recomputed), with its own tokenizer.json, and ends equal
bit for bit to a run that never stopped."""

import json

import numpy as np
import pytest

import gflow.runs.text.run as text_run
from gflow.cli import main
from gflow.runs import load_trajectory
from tests.test_text_cli import _story


def _args(corpus, out):
    return [
        "text",
        "--corpus",
        str(corpus),
        "--tokenizer",
        "bpe",
        "--vocab-size",
        "40",
        "--context",
        "6",
        "--windows",
        "48",
        "--steps",
        "12",
        "--opt-steps",
        "6",
        "--num-saves",
        "3",
        "--num-queries",
        "1",
        "--sharpness-checks",
        "2",
        "--seeds",
        "2",
        "--out",
        str(out),
    ]


@pytest.mark.slow  # four CLI runs' compilations: ~1 min on 2 cores
def test_interrupted_text_run_resumes_bit_for_bit(tmp_path, monkeypatch, capsys):
    pytest.importorskip("tokenizers")
    corpus = _story(tmp_path / "story.txt")
    assert main(["--quiet", *_args(corpus, tmp_path / "whole")]) == 0

    arm = text_run._arm
    calls = []

    def killed_in_the_second_arm(cfg, seed, *a):
        calls.append(seed)
        if len(calls) == 2:
            raise KeyboardInterrupt  # as a Ctrl-C in seed 1's optimizer arm
        return arm(cfg, seed, *a)

    monkeypatch.setattr(text_run, "_arm", killed_in_the_second_arm)
    cut = tmp_path / "cut"
    assert main(_args(corpus, cut)) == 130
    assert "--resume" in capsys.readouterr().err
    assert sorted(p.name for p in (cut / "pieces").iterdir()) == [
        "adam_s0-000.npz",
        "gd_s0-000.npz",
        "gd_s1-000.npz",
    ]
    assert (cut / "tokenizer.json").exists() and not (cut / "stages.json").exists()
    monkeypatch.setattr(text_run, "_arm", arm)

    assert main(["text", "--resume", str(cut)]) == 0
    out = capsys.readouterr().out
    assert out.count("(read back)") == 3 and "[4/4] adam_s1 success" in out
    for name in ("gd_s0", "adam_s0", "gd_s1", "adam_s1"):
        a = load_trajectory(tmp_path / "whole", name=name)
        b = load_trajectory(cut, name=name)
        assert a.metrics.keys() == b.metrics.keys()
        for k in a.metrics:
            np.testing.assert_array_equal(a.metrics[k], b.metrics[k], err_msg=k)
        np.testing.assert_array_equal(a.final.W_E, b.final.W_E)
        assert a.info["seed"] == b.info["seed"]
    for f in ("stages.json", "row_phases.json", "stages_summary.json"):
        whole = json.loads((tmp_path / "whole" / f).read_text())
        assert whole == json.loads((cut / f).read_text()), f
    assert "stability" in load_trajectory(cut, name="gd_s0").info


def test_resume_refuses_options_and_missing_files(tmp_path, capsys):
    """--resume takes no settings (they are the run's), needs config.json and, for a
    subword run, tokenizer.json; without --resume, --corpus is required."""
    assert main(["text", "--resume", str(tmp_path)]) == 2
    assert "has no config.json" in capsys.readouterr().err
    assert main(["text", "--vocab-size", "40"]) == 2
    assert "give --corpus" in capsys.readouterr().err
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(
        json.dumps({"config": {"corpus": "x.txt", "tokenizer": "bpe"}})
    )
    err = "--resume continues a run as configured; drop --vocab-size, --float64, --out"
    assert (
        main(
            [
                "text",
                "--resume",
                str(run),
                "--vocab-size",
                "40",
                "--float64",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert err in capsys.readouterr().err
    assert main(["text", "--resume", str(run)]) == 2
    assert "has no tokenizer.json" in capsys.readouterr().err
    (run / "config.json").write_text(json.dumps({"config": {"corpus": 3}}))
    assert main(["text", "--resume", str(run)]) == 2
    assert "corpus" in capsys.readouterr().err


def test_a_piece_of_another_configuration_is_refused(tmp_path):
    """A finished run saved under one configuration is not read back into another
    (its fingerprint differs), and a run with snapshots is refused on saving."""
    from gflow.runs.text import RunPieces, TextConfig, init_model, prepare

    corpus = _story(tmp_path / "story.txt")
    cfg = TextConfig(corpus=str(corpus), vocab_size=12, context=4, windows=16)
    data = prepare(cfg)
    model = init_model(cfg, len(data.vocab))
    from gflow.dynamics import Trajectory

    traj = Trajectory(
        t=np.arange(3.0),
        metrics={"loss": np.ones(3)},
        final=model,
        info={"seed": 0, "stability": {"ratio": np.float32(0.5)}},
        stats={"s": 1.0},
    )
    pieces = RunPieces(tmp_path, cfg, data)
    assert pieces.load("gd", model) is None
    pieces.save("gd", traj)
    back = pieces.load("gd", model)
    np.testing.assert_array_equal(back.final.W_E, model.W_E)
    assert back.info == {"seed": 0, "stability": {"ratio": 0.5}}
    assert back.status == "success" and back.stats == {"s": 1.0}
    other = RunPieces(tmp_path, TextConfig(**{**cfg.__dict__, "lr": 0.1}), data)
    with pytest.raises(ValueError, match="different configuration"):
        other.load("gd", model)
    same = TextConfig(**{**cfg.__dict__, "tokenizer_file": None, "download": True})
    assert RunPieces(tmp_path, same, data).load("gd", model) is not None
    # a setting at its default is not in the hash: one added later (at a default
    # that computes the same) leaves earlier pieces readable
    import dataclasses

    from gflow.runs import fingerprint
    from gflow.runs.text import text_fingerprint

    # the hash recomputed by hand: settings off their defaults, with the solver's
    # default taken as tsit5 (its default until issue 31), then the data
    def by_hand(c):
        fields = {f.name: f.default for f in dataclasses.fields(c)}
        fields["solver"] = "tsit5"
        settings = {
            k: v
            for k, v in dataclasses.asdict(c).items()
            if k not in ("tokenizer_file", "download") and v != fields[k]
        }
        settings |= dict(
            vocab=list(data.vocab.tokens),
            queries=list(data.queries),
            top=list(data.top),
        )
        return fingerprint(
            np.asarray(data.sample), np.asarray(data.row_sample), settings=settings
        )

    hashes = {}
    for solver in ("tsit5", "auto", "rkc2"):
        c = dataclasses.replace(cfg, solver=solver)
        hashes[solver] = text_fingerprint(c, data)
        assert hashes[solver] == by_hand(c)
    assert cfg.solver == "auto" and len(set(hashes.values())) == 3
    with pytest.raises(ValueError, match="snapshots"):
        pieces.save(
            "x", Trajectory(t=traj.t, metrics=traj.metrics, final=model, params=model)
        )


class _Stop(Exception):
    pass


@pytest.mark.parametrize("quiet", [False, True])
def test_a_text_flow_shows_its_progress_unless_quiet(tmp_path, monkeypatch, quiet):
    """gflow text --method flow defaults to the stiffness-aware solver and hands
    run_text a flow whose progress lines show on a terminal (progress None), or
    none with --quiet: what the job passes, caught before anything runs."""
    from gflow.dynamics.solvers import AutoSwitch

    seen = {}

    def stub(cfg, data, *, strategies, **kw):
        seen["method"] = strategies.method
        raise _Stop

    monkeypatch.setattr("gflow.runs.text.run.run_text", stub)
    argv = ["text", "--corpus", str(_story(tmp_path / "s.txt")), "--method", "flow"]
    argv += ["--vocab-size", "12", "--context", "4", "--windows", "8"]
    argv += ["--out", str(tmp_path / "run")]
    with pytest.raises(_Stop):
        # --debug: the stub's exception propagates
        main(["--debug", *(["--quiet"] if quiet else []), *argv])
    assert isinstance(seen["method"].solver, AutoSwitch)
    assert seen["method"].progress is (False if quiet else None)
    assert callable(seen["method"].interrupt)  # the command's signal watch


@pytest.mark.slow  # compiles a flow: CI's slow steps (the wiring is checked above)
def test_a_watched_text_flow_ends_at_its_interrupt():
    """gflow text's and train's flow method asks the job's signal watch from inside
    its solve: an interrupt that is already true ends the solve in
    KeyboardInterrupt (a finished run's pieces stay, the run resumes); GD has no
    such place and is the same method watched or not."""
    import jax

    from gflow import AttentionModel
    from gflow.text import FullBatchGD, IntegratedFlow, TextLoss

    windows = np.random.default_rng(1).integers(0, 4, size=(5, 4)).astype(np.int32)
    model = AttentionModel.init(
        d_vocab=4, d_model=3, key=jax.random.key(1), dtype=np.float64
    )
    flow = IntegratedFlow(lr=0.01, steps=20, num_saves=2, solver=None)
    with pytest.raises(KeyboardInterrupt):
        flow.watched(lambda: True).run(TextLoss(windows, d_vocab=4), model)
    gd = FullBatchGD(lr=0.01, steps=20, num_saves=2)
    assert gd.watched(lambda: True) is gd
