"""``gflow text``'s optimizer arm and seeds (issue 16, points 2 and 5): the schedule on
the shared clock, AdamW with decay and clipping against a hand-written optax loop,
the seeds' determinism, the old option names, and the usage errors."""

import json
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import optax
import pytest

from gflow.cli import build_parser, main
from gflow.runs import load_trajectory
from gflow.runs.text import TextConfig, init_model, prepare
from gflow.text import TextLoss, WindowStream, batch_loss, warmup_cosine


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = np.random.default_rng(0)
    words = ["the", "cat", "dog", "sat", "ran", "on", "mat", "big", "red", "a"]
    p = 1.0 / np.arange(1, len(words) + 1)
    sents = [
        " ".join(rng.choice(words, size=6, p=p / p.sum())) + "." for _ in range(200)
    ]
    path = tmp_path_factory.mktemp("corpus") / "story.txt"
    path.write_text(" ".join(sents))
    return path


def _base(corpus):
    return [
        "--quiet",
        "text",
        "--corpus",
        str(corpus),
        "--vocab-size",
        "8",
        "--context",
        "5",
        "--windows",
        "32",
        "--d-model",
        "4",
        "--steps",
        "4",
        "--num-saves",
        "2",
        "--num-queries",
        "1",
        "--track",
        "cat",
        "--float64",
    ]


def _eta(k, peak, w, total, final):
    """The warmup-cosine step size, written out here (the test's closed form)."""
    k = np.asarray(k, float)
    cos = final + (peak - final) * (1 + np.cos(np.pi * (k - w) / (total - w))) / 2
    return np.where(k < w, peak * k / max(w, 1), cos)


def _config(out: Path) -> TextConfig:
    cfg = json.loads((out / "config.json").read_text())["config"]
    return TextConfig(**{**cfg, "track": tuple(cfg["track"])})


@pytest.mark.slow
def test_warmup_cosine_is_optax_schedule_and_the_clock_sums_it(corpus, tmp_path):
    """warmup_cosine equals optax's warmup-cosine schedule; a scheduled run's clock
    is the cumulative sum of the schedule's step sizes (closed form), for full-batch
    gd (named gd_opt beside the reference gd) and for sgd on minibatches."""
    k = np.arange(40)
    for w, final in ((7, 0.01), (0, 0.0)):
        ours = warmup_cosine(k, np.float64(0.3), w, 30, np.float64(final), xp=np)
        ref = optax.warmup_cosine_decay_schedule(0.0, 0.3, w, 30, final)(k)
        np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(ours[:30], _eta(k[:30], 0.3, w, 30, final))
    sched = [
        "--schedule",
        "warmup-cosine",
        "--warmup",
        "0.25",
        "--final-lr",
        "0.01",
        "--opt-lr",
        "0.5",
        "--opt-steps",
        "8",
    ]
    for name, extra in (
        ("gd_opt", ["--optimizer", "gd"]),
        ("sgd", ["--optimizer", "sgd", "--batch", "4"]),
    ):
        out = tmp_path / name
        assert main([*_base(corpus), *sched, *extra, "--out", str(out)]) == 0
        traj = load_trajectory(out, name=name)
        clock = np.concatenate([[0.0], np.cumsum(_eta(np.arange(8), 0.5, 2, 8, 0.01))])
        saved = np.append(np.arange(2) * 4, 8)  # steps 0, 4, 8
        np.testing.assert_allclose(traj.t, clock[saved], rtol=1e-12)
        assert (
            traj.info["schedule"] == "warmup-cosine" and traj.info["warmup_steps"] == 2
        )
        assert np.all(np.isfinite(traj.metrics["loss"]))
    assert load_trajectory(out, name="gd").t[-1] == pytest.approx(4 * 0.25)


def _optax_by_hand(cfg: TextConfig, batch: int):
    """AdamW with decay 0.3, clipping at 0.05 and warmup-cosine (peak 0.05, 2 of 6
    steps warmup, final 1e-3) from seed 2's init, stepped by hand with optax: (final
    model, full-batch loss, the gradient norms seen)."""
    data = prepare(cfg)
    d = len(data.vocab)
    model = init_model(cfg, d, seed=2)
    sched = optax.warmup_cosine_decay_schedule(0.0, 0.05, 2, 6, 1e-3)
    # optax evaluates it at its int32 count, in float32 even under x64
    tx = optax.chain(
        optax.clip_by_global_norm(0.05),
        optax.adamw(lambda n: sched(n.astype(np.float64)), weight_decay=0.3),
    )
    full = TextLoss(data.sample, d_vocab=d)
    stream = WindowStream(data.ids, length=5, batch=4)
    key = jax.random.key(2 + 1)  # the minibatch key of seed 2
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def loss(p, k):
        if batch:
            return batch_loss(
                eqx.combine(p, static), stream(jax.random.fold_in(key, k))
            )
        return full(eqx.combine(p, static))

    state, norms = tx.init(params), []
    for k in range(6):
        g = jax.grad(loss)(params, k)
        norms.append(float(optax.tree.norm(g)))
        u, state = tx.update(g, state, params)
        params = optax.apply_updates(params, u)
    want = eqx.combine(params, static)
    return want, full(want), norms


@pytest.mark.slow  # in CI's slow step (.ci/run): 12-15 s
def test_adamw_decay_and_clipping_match_a_hand_written_optax_loop(corpus, tmp_path):
    """The adamw arm with weight decay, clipping and warmup-cosine equals
    optax.chain(clip_by_global_norm, adamw(warmup_cosine_decay_schedule)) stepped
    by hand from the run's init, on the fixed sample (--batch 0) and on the same
    minibatches (--batch 4: batch k = stream(fold_in(key(seed + 1), k)))."""
    arm = [
        "--optimizer",
        "adamw",
        "--weight-decay",
        "0.3",
        "--clip",
        "0.05",
        "--schedule",
        "warmup-cosine",
        "--warmup",
        "0.34",
        "--final-lr",
        "1e-3",
        "--opt-lr",
        "0.05",
        "--opt-steps",
        "6",
        "--init-scale",
        "0.5",
        "--seed",
        "2",
    ]
    for batch in (0, 4):
        out = tmp_path / f"b{batch}"
        argv = [*_base(corpus), *arm, "--batch", str(batch), "--out", str(out)]
        assert main(argv) == 0
        jax.config.update("jax_enable_x64", True)  # the run set it; the loop needs it
        got = load_trajectory(out, name="adamw")
        want, loss, norms = _optax_by_hand(_config(out), batch)
        assert max(norms) > 0.05  # the clipping acted
        for a, b in zip(jax.tree.leaves(got.final), jax.tree.leaves(want)):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(got.metrics["loss"][-1], loss, rtol=1e-9)
        assert got.info["optimizer"] == "adamw" and got.info["batch"] == batch


def _comparable(out: Path) -> dict:
    """Every file of a run directory but figures, the log and the write lock, with
    wall times and config.json's environment (its creation time) blanked; the
    resume pieces (pieces/, tested in test_text_resume.py) hold the same runs as the
    trajectory files."""
    files = {}
    for p in sorted(out.iterdir()):
        if p.suffix in (".png", ".log", ".lock") or p.is_dir():
            continue
        if p.name == "config.json":
            files[p.name] = {**json.loads(p.read_text()), "environment": None}
            continue
        if p.suffix == ".json" and (out / f"{p.stem}_metrics.npz").exists():
            meta = json.loads(p.read_text())
            meta["stats"] = {
                k: v for k, v in meta["stats"].items() if not k.endswith("_s")
            }
            files[p.name] = meta
        else:
            files[p.name] = p.read_bytes()
    return files


@pytest.mark.slow  # in CI's slow step (.ci/run): 12-15 s
def test_seeds_match_single_runs_and_repeat_bit_for_bit(corpus, tmp_path, capsys):
    """--seeds 2 --seed 3 writes gd_s3, gd_s4, adam_s3, adam_s4; seed 4's runs equal
    a single run with --seed 4 (given through the old names --adam-steps,
    --adam-batch, --adam-lr) bit for bit; a second invocation writes the same files;
    stages_summary.json and the printed table give each stage's mean ± sd."""
    more = ["--num-saves", "10", "--init-scale", "0.1"]  # enough for stages
    arm = [*more, "--opt-steps", "40", "--batch", "4", "--opt-lr", "0.2"]
    old = [*more, "--adam-steps", "40", "--adam-batch", "4", "--adam-lr", "0.2"]
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert (
        main([*_base(corpus), *arm, "--seeds", "2", "--seed", "3", "--out", str(a)])
        == 0
    )
    printed = capsys.readouterr().out
    assert main([*_base(corpus), *old, "--seed", "4", "--out", str(b)]) == 0
    assert (
        main([*_base(corpus), *arm, "--seeds", "2", "--seed", "3", "--out", str(c)])
        == 0
    )
    A, B = _comparable(a), _comparable(b)
    assert {"gd_s3.json", "gd_s4.json", "adam_s3.json", "adam_s4.json"} <= set(A)
    assert not (a / "gd.json").exists() and not (b / "stages_summary.json").exists()
    for name in ("gd", "adam"):
        for part in ("_metrics.npz", "_rows.npz", "_final.eqx", "_metrics.csv"):
            assert A[f"{name}_s4{part}"] == B[f"{name}{part}"], (name, part)
            assert A[f"{name}_s3{part}"] != A[f"{name}_s4{part}"]  # its own init
        assert A[f"{name}_s4.json"] == B[f"{name}.json"]  # wall times aside
    assert A == _comparable(c)  # a second invocation: the same files
    summary = json.loads((a / "stages_summary.json").read_text())
    assert summary["seeds"] == [3, 4] and set(summary["runs"]) == {"gd", "adam"}
    stages = json.loads((a / "stages.json").read_text())
    for run, entry in summary["runs"].items():
        for row in entry["stages"]:
            found = [t for t in row["t_start"]["per_seed"] if t is not None]
            assert len(found) == row["found"]
            assert row["t_start"]["mean"] == pytest.approx(np.mean(found))
            if len(found) == 2:
                assert row["t_start"]["sd"] == pytest.approx(np.std(found, ddof=1))
        per_seed = [stages[f"{run}_s{s}"] for s in (3, 4)]
        n = sum(len(e.get("stages", [])) for e in per_seed)
        assert n == sum(row["found"] for row in entry["stages"])
    rows = summary["runs"]["adam"]["stages"]
    assert any(r["found"] == 2 and r["t_end"]["sd"] is not None for r in rows)
    assert "stage times over 2 seeds" in printed and "condensation" in printed


def test_old_option_names_are_aliases():
    """--adam-lr, --adam-steps and --adam-batch set what --opt-lr, --opt-steps and
    --batch set; by default the arm is Adam at a constant step, named "adam"."""
    parser = build_parser()
    old = parser.parse_args(
        [
            "text",
            "--corpus",
            "x",
            "--adam-lr",
            "0.1",
            "--adam-steps",
            "3",
            "--adam-batch",
            "2",
        ]
    )
    new = parser.parse_args(
        ["text", "--corpus", "x", "--opt-lr", "0.1", "--opt-steps", "3", "--batch", "2"]
    )
    assert (old.opt_lr, old.opt_steps, old.batch) == (0.1, 3, 2)
    assert vars(old) == vars(new)
    cfg = TextConfig(corpus="x")
    assert (cfg.optimizer, cfg.schedule, cfg.clip, cfg.batch) == (
        "adam",
        "constant",
        0,
        0,
    )
    assert cfg.run_names(0) == ("gd", "adam") and cfg.seeds == 1


@pytest.mark.parametrize(
    "tail, word",
    [
        (["--clip", "-1"], "clip"),
        (["--warmup", "1"], "warmup"),
        (["--warmup", "-0.1"], "warmup"),
        (["--optimizer", "lion"], "optimizer"),
        (["--schedule", "linear"], "schedule"),
        (["--seeds", "0"], "seeds"),
        (["--final-lr=-1e-3"], "final_lr"),
        (["--weight-decay", "nan"], "weight_decay"),
        (["--optimizer", "sgd"], "sgd runs on fresh minibatches"),
        (["--optimizer", "gd", "--batch", "4"], "gd runs on the fixed sample"),
        (["--seed", str(2**32 - 1), "--seeds", "2"], "seeds"),
    ],
)
def test_bad_optimizer_settings_are_one_line_usage_errors(corpus, tail, word, capsys):
    assert main([*_base(corpus), *tail]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and word in err and "Traceback" not in err
