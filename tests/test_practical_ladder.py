"""The ladder experiment's pieces (issue 30 point 2): the Wilson interval, the key
classes of constructed attention patterns, the rungs adding one change each, and
the quick path end to end (slow), and every cell as a ``gflow train`` command."""

import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import deep_cycle as dc
from experiments import practical_ladder as pl
from gflow import load_run
from gflow.cli import build_parser, main, resolve
from gflow.runs.train import TrainJob, train_strategies
from gflow.text import DeepText


def test_wilson_interval_matches_its_closed_form():
    lo, hi = pl._wilson(5, 10)
    z = 1.96
    centre = (0.5 + z * z / 20) / (1 + z * z / 10)
    half = z * np.sqrt(0.25 / 10 + z * z / 400) / (1 + z * z / 10)
    assert (lo, hi) == pytest.approx((centre - half, centre + half))
    assert pl._wilson(0, 8)[0] == 0.0 and pl._wilson(8, 8)[1] == pytest.approx(1.0)


def _pattern(kind, tokens):
    """Causal attention [b, 1, 1, n, n] that puts all mass on one key class."""
    b, n = tokens.shape
    a = np.zeros((b, 1, 1, n, n))
    for k in range(b):
        for i in range(n):
            if kind == "previous":
                j = max(i - 1, 0)
            elif kind == "first":
                j = 0
            else:  # uniform
                a[k, 0, 0, i, : i + 1] = 1 / (i + 1)
                continue
            a[k, 0, 0, i, j] = 1.0
    return jnp.asarray(a)


@pytest.mark.parametrize("kind", ["previous", "first", "uniform"])
def test_key_classes_name_the_pattern(kind):
    tokens = np.asarray(jax.random.randint(jax.random.key(0), (16, 20), 0, 5))
    mass, chance = (
        np.asarray(x)
        for x in pl._class_mass(_pattern(kind, tokens), jnp.asarray(tokens), 0)
    )
    ratio = mass[:, 0, 0] / chance
    if kind == "uniform":  # every class at its chance
        np.testing.assert_allclose(ratio, 1.0, rtol=1e-6)
    else:
        assert pl.KEY_CLASSES[int(np.argmax(ratio))] == kind
        assert ratio.max() >= 2


def test_each_rung_adds_one_change():
    names = [name for name, _ in pl.RUNGS]
    assert names[0] == "0 paper" and len(names) == 9
    for (_, before), (_, after) in zip(pl.RUNGS, pl.RUNGS[1:]):
        changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
        assert len(changed) == 1, changed


@pytest.mark.slow
def test_the_quick_path_writes_its_page(tmp_path, monkeypatch):
    monkeypatch.setattr(pl, "OUT", tmp_path / "results")
    monkeypatch.setattr(pl, "FIGURE", tmp_path / "ladder.png")
    pl.run(pl.QUICK, log=lambda *a, **k: None)
    text = pl.page(pl.QUICK)
    assert "| markov | 0 paper | gd | 2 |" in text
    assert (tmp_path / "ladder.png").exists()
    runs = pl._runs(pl.QUICK)
    assert len(runs) == 2 * 2 * 3 * 2  # data × rungs × methods × seeds
    assert all(len(r["key_mass"]["chance"]) == len(pl.KEY_CLASSES) for r in runs)


def test_the_control_data_has_no_context_to_use():
    """The i.i.d. control: every row of its chain is π, so the Bayes loss is the
    unigram loss, and its samples follow π (a frequency check on the held-out set)."""
    data = pl.iid_data(pl.QUICK)
    assert data.name == "markov-iid" and data.d_vocab == 4
    assert data.bayes_loss == pytest.approx(data.unigram_loss, abs=1e-12)
    freq = np.bincount(np.asarray(data.held_out).ravel(), minlength=4)
    freq = freq / freq.sum()
    np.testing.assert_allclose(freq, [0.75, 0.19, 0.05, 0.01], atol=0.05)


def test_the_uniform_control_has_no_frequent_token_but_a_useful_context():
    """π uniform, λ = 0.5: the held-out tokens are uniform, and the Bayes loss lies
    below the unigram loss ln 4 (the context helps)."""
    data = pl.uniform_data(pl.Config())  # 128 held-out sequences: a tight check
    assert data.name == "markov-uniform" and data.d_vocab == 4
    assert data.unigram_loss == pytest.approx(np.log(4), abs=1e-12)
    # the repeat probability is λ + (1 - λ)/4 = 0.625, the others 0.125 each
    want = -(0.625 * np.log(0.625) + 3 * 0.125 * np.log(0.125))
    assert data.bayes_loss == pytest.approx(want, abs=1e-12)
    freq = np.bincount(np.asarray(data.held_out).ravel(), minlength=4)
    np.testing.assert_allclose(freq / freq.sum(), 0.25, atol=0.05)


@pytest.mark.parametrize(
    "data", ["markov", "markov-iid", "markov-uniform", "icl-markov", *pl.CORPORA]
)
def test_every_cell_is_a_gflow_train_command(data):
    """Issue 30's done-when: every cell of the ladder runs from ``gflow train``.
    Each cell's command line builds the rung's model, the data set and the method
    with the ladder's step sizes, samples, steps and seed."""
    if data in pl.CORPORA and not (pl.DATA_ROOT / pl.CORPORA[data][0]).exists():
        pytest.skip("the shared corpora are absent")
    cfg = pl.Config()
    parser = build_parser()
    for rung, _ in pl.RUNGS:
        for method in dc.METHODS:
            argv = pl.train_argv(cfg, data, rung, method, seed=3)
            train = resolve(TrainJob(), parser.parse_args(argv)).cfg.base
            model = train_strategies(train).model
            want = {"n_layers": 1, "n_heads": 1, **pl._settings(cfg, rung)}
            assert model == DeepText(
                d_model=cfg.d_model,
                init_scale=want["init_scale"],
                layers=want["n_layers"],
                heads=want["n_heads"],
                d_ff=want.get("d_ff"),
                value=want.get("value", False),
                layernorm=want.get("layernorm", False),
                residual=want.get("residual", False),
                max_len=want.get("max_len"),
            )
            assert (train.seq_len, train.steps, train.seed) == (
                cfg.context,
                cfg.steps,
                3,
            )
            if method == "gd":
                assert (train.method, train.lr, train.windows) == (
                    "gd",
                    cfg.lr,
                    cfg.gd_sample,
                )
            elif method == "sgd":
                assert (train.optimizer, train.lr, train.batch) == (
                    "sgd",
                    cfg.lr,
                    cfg.batch,
                )
            else:
                assert (train.optimizer, train.schedule, train.lr) == (
                    "adamw",
                    "warmup-cosine",
                    cfg.adamw_lr,
                )
            assert (train.lam == 0.0) == (data == "markov-iid")
            assert (train.pi == pl.UNIFORM_PI) == (data == "markov-uniform")
            if data in pl.CORPORA:
                assert (train.tokenizer, train.whitespace) == (
                    "bpe",
                    pl.CORPORA[data][1],
                )


@pytest.mark.slow  # one quick cell, trained through the command line
def test_a_quick_cell_trains_from_the_command_line(tmp_path):
    argv = pl.train_argv(pl.QUICK, "icl-markov", "3 +residual", "gd", seed=0)
    out = tmp_path / "cell"
    assert main(["--quiet", *argv, "--out", str(out), "--no-figures"]) == 0
    final = load_run(out)["train"].final
    assert final.residual and len(final.blocks) == 2


def test_a_tie_of_key_classes_names_every_class_in_a_fixed_order():
    assert pl.most_common(["diffuse", "top token", "diffuse"]) == "diffuse (2/3)"
    tie = ["diffuse", "previous", "top token", "diffuse", "top token", "previous"]
    assert pl.most_common(tie) == "top token / previous / diffuse (2/6 each)"
    assert pl.most_common([]) == "—"


def _bigram_information(ids, d):
    """Mutual information (nats) between a piece and the next one."""
    joint = np.zeros((d, d))
    np.add.at(joint, (ids[:-1], ids[1:]), 1.0)
    joint /= joint.sum()
    a, b = joint.sum(1, keepdims=True), joint.sum(0, keepdims=True)
    nz = joint > 0
    return float(np.sum(joint[nz] * np.log(joint[nz] / (a @ b)[nz])))


def test_the_shuffled_text_control_keeps_the_pieces_and_drops_their_order(
    monkeypatch,
):
    """The shuffled control is the corpus's own pieces (the same multiset) in a
    fixed random order: the information a piece carries about the next one falls
    from the corpus's to that of any random order (the plug-in estimate's bias),
    and its cells refuse to pose as gflow train commands."""
    base = pl.CORPORA["tinystories-bpe-isolated"][0]
    if not (pl.DATA_ROOT / base).exists():
        pytest.skip(f"{pl.DATA_ROOT / base} is absent")
    cfg = dataclasses.replace(pl.QUICK, vocab_size=pl.TEXT_VOCAB, max_chars=20_000)
    seen = {}

    def capture(cfg, name, vocab, ids, describe):
        seen[name] = (np.asarray(ids), len(vocab), describe(len(ids), "x"))
        return None

    monkeypatch.setattr(pl.dc, "corpus_data", capture)
    for name in ("tinystories-bpe-isolated", "tinystories-bpe-isolated-shuffled"):
        pl.bpe_data(cfg, name)
    (ids, d, _), (shuf, d2, text) = seen.values()
    assert d == d2 and len(ids) == len(shuf) and not np.array_equal(ids, shuf)
    np.testing.assert_array_equal(np.sort(ids), np.sort(shuf))
    assert "random order" in text
    # the plug-in estimate is biased upwards on a finite sample, so the reference
    # is another random order of the same pieces (its information is that bias)
    other = np.random.default_rng(1).permutation(ids)
    before, after = _bigram_information(ids, d), _bigram_information(shuf, d)
    bias = _bigram_information(other, d)
    assert before > 2 * bias and abs(after - bias) < 0.1 * bias
    with pytest.raises(ValueError, match="gflow train does not shuffle"):
        pl.train_argv(cfg, "tinystories-bpe-isolated-shuffled", "0 paper", "gd", 0)


def _run(data, rung, method, stages, heads=(1, 1)):
    """A cached run as cell_table reads it: one saved time, ``heads`` = (layers,
    heads), ``stages`` = [(layer, head, stage, cycle)]."""
    return {
        "data": data,
        "rung": rung,
        "method": method,
        "seed": 0,
        "status": "success",
        "head_entropy": np.zeros((1, *heads)).tolist(),
        "stages": [
            {"layer": lay, "head": h, "stage": st, "cycle": c}
            for lay, h, st, c in stages
        ],
        "key_classes": [["diffuse"] * heads[1]] * heads[0],
    }


def test_the_control_comparison_pools_heads_by_rung_group():
    """Rungs 0-2 and 3-8 are pooled apart, each side counts its own heads, and
    the brackets are the Wilson intervals of the pooled counts."""
    corpus, control = "tinystories-bpe-isolated", "tinystories-bpe-isolated-shuffled"
    real = [
        _run(corpus, "0 paper", "gd", [(0, 0, "focus", 1)]),
        _run(corpus, "1 +heads", "gd", [(0, 1, "dilution", 1)], heads=(1, 2)),
        _run(
            corpus, "4 +pre-LN", "gd", [(0, 0, "focus", 1), (1, 1, "focus", 1)], (2, 2)
        ),
    ]
    shuffled = [
        _run(control, "0 paper", "gd", []),
        _run(control, "5 +value/output", "gd", [(0, 0, "focus", 1)], (2, 2)),
    ]
    table = pl.control_comparison(real, shuffled).splitlines()
    row = {
        tuple(c.strip() for c in line.split("|")[1:4]): [
            c.strip() for c in line.split("|")[4:8]
        ]
        for line in table[2:]
    }
    lo, hi = pl._wilson(1, 3)
    assert row[(corpus, "gd", "0-2")] == [
        f"1/3 [{lo:.2f}, {hi:.2f}]",
        "0/1 [0.00, 0.79]",
        f"1/3 [{lo:.2f}, {hi:.2f}]",
        "0/1 [0.00, 0.79]",
    ]
    assert row[(corpus, "gd", "3-8")][:2] == ["2/4 [0.15, 0.85]", "1/4 [0.05, 0.70]"]
    assert row[(corpus, "adamw", "3-8")][0].startswith("0/0")


def test_the_control_figure_draws_each_cell_beside_its_control(monkeypatch, tmp_path):
    """Per corpus and method the figure's solid lines are the cells' fractions of
    heads with a focus and a dilution rung by rung, its dashed lines the
    control's, and only the control has a band."""
    import gflow.plotting

    corpus, control = "tinystories-bpe-isolated", "tinystories-bpe-isolated-shuffled"
    real = [
        _run(corpus, "0 paper", "gd", [(0, 0, "focus", 1)]),
        _run(corpus, "1 +heads", "gd", [(0, 1, "dilution", 1)], heads=(1, 2)),
        _run(
            corpus, "4 +pre-LN", "gd", [(0, 0, "focus", 1), (1, 1, "focus", 1)], (2, 2)
        ),
    ]
    shuffled = [
        _run(control, "0 paper", "gd", []),
        _run(control, "5 +value/output", "gd", [(0, 0, "focus", 1)], (2, 2)),
    ]
    drawn = []
    monkeypatch.setattr(
        gflow.plotting, "save_figure", lambda fig, path: drawn.append(fig)
    )
    pl.control_figure(real, shuffled, dict(pl.SHUFFLED), tmp_path / "x.png")
    (fig,) = drawn
    ax = fig.axes[0]  # the only corpus with runs, GD
    assert ax.get_title() == f"{corpus}, gd"
    lines = [
        (ln.get_linestyle(), list(ln.get_xdata()), list(ln.get_ydata()))
        for ln in ax.lines
    ]
    assert lines == [
        ("-", [0, 1, 4], [1.0, 0.0, 0.5]),  # focus on the corpus
        ("-", [0, 1, 4], [0.0, 0.5, 0.0]),  # dilution
        ("--", [0, 5], [0.0, 0.25]),  # focus on the control
        ("--", [0, 5], [0.0, 0.0]),
    ]
    import matplotlib.pyplot as plt

    plt.close(fig)  # save_figure would have closed it
    assert len(ax.collections) == 2  # the control's two bands
    assert len(fig.axes) == 1  # methods without runs get no column


def test_beyond_control_lists_the_rungs_outside_the_controls_interval():
    """A cell counts as beyond its control only outside the control's Wilson
    interval: 1 of 1 focusing heads against 0 of 1 (interval [0, 0.79]) is above;
    2 of 4 against 1 of 4 ([0.05, 0.70]) is not; 0 of 20 diluting against 10 of 20
    is below."""
    corpus, control = "tinystories-bpe-isolated", "tinystories-bpe-isolated-shuffled"
    real = [
        _run(corpus, "0 paper", "gd", [(0, 0, "focus", 1)]),
        _run(
            corpus, "4 +pre-LN", "gd", [(0, 0, "focus", 1), (1, 1, "focus", 1)], (2, 2)
        ),
        _run(corpus, "5 +value/output", "gd", [], (4, 5)),
    ]
    ctrl_heads = [(k // 5, k % 5, "dilution", 1) for k in range(10)]
    shuffled = [
        _run(control, "0 paper", "gd", []),
        _run(control, "4 +pre-LN", "gd", [(0, 0, "focus", 1)], (2, 2)),
        _run(control, "5 +value/output", "gd", ctrl_heads, (4, 5)),
    ]
    rows = pl.beyond_control(real, shuffled, dict(pl.SHUFFLED)).splitlines()[2:]
    cells = [[c.strip() for c in r.split("|")[1:-1]] for r in rows]
    assert all(c[1] == control for c in cells)  # the control is named
    table = {(c[0], c[2], c[3]): c[4:6] for c in cells}
    assert [c.strip() for c in table[(corpus, "gd", "focus")]] == ["0", "none"]
    assert [c.strip() for c in table[(corpus, "gd", "dilution")]] == ["none", "5"]
    assert (corpus, "adamw", "focus") not in table  # no runs, no row


def _series(n=40):
    """One head's saves: the loss falls over saves 0-10 and then rests; the head's
    entropy falls by 0.176 nats per save over saves 15-20 as its excess on the top
    token rises by 0.176 per save; the tracked queries' excess on the top token
    falls by 0.12 per save over saves 25-30."""
    t = np.arange(n) * 7.5
    loss = np.where(np.arange(n) < 10, 1.0 - 0.05 * np.arange(n), 0.5)
    ent = np.interp(np.arange(n), [15, 20], [1.38, 0.5])
    every = np.zeros((n, 1, 1, 5))
    every[:, 0, 0, 0] = np.interp(np.arange(n), [15, 20], [0.0, 0.88])
    tracked = np.zeros((n, 1, 1, 5))
    tracked[:, 0, 0, 0] = np.interp(np.arange(n), [25, 30], [0.6, 0.0])
    metrics = {
        "held_out_loss": loss,
        "head_entropy": ent[:, None, None],
        "head_key_excess": every,
        "head_tracked_key_excess": tracked,
        "head_top_query_excess": np.zeros((n, 1, 1)),
    }
    return types.SimpleNamespace(t=t, metrics=metrics)


def test_online_events_replay_the_saves_through_the_online_rules():
    """Focus where the excess on top first lies the margin (0.05) above its running
    minimum: save 16 (0.176), with the entropy fall (0.1 nats below its maximum)
    at the same save; dilution where the tracked excess first lies 0.05 below its
    maximum since the focus: save 26 (0.48)."""
    events = {e["event"]: e for e in pl.online_events(_series())}
    assert events["condensation"]["step"] <= 15
    assert (events["focus"]["step"], events["focus"]["t"]) == (16, 16 * 7.5)
    assert (events["focus"]["layer"], events["focus"]["head"]) == (0, 0)
    assert events["dilution"]["step"] == 26
    assert (events["entropy_fall"]["step"], events["entropy_fall"]["key"]) == (
        16,
        "top",
    )
    flat = _series()
    flat.metrics["head_entropy"] = np.full((40, 1, 1), 1.38)
    flat.metrics["head_key_excess"] = np.zeros((40, 1, 1, 5))
    assert "focus" not in {e["event"] for e in pl.online_events(flat)}
    broken = _series()
    broken.metrics["head_entropy"] = broken.metrics["head_entropy"].copy()
    broken.metrics["head_entropy"][14:] = np.nan  # diverged before the focus
    assert "focus" not in {e["event"] for e in pl.online_events(broken)}


def test_the_online_table_counts_heads_online_and_offline():
    run = {
        "data": "markov-iid",
        "rung": "3 +residual",
        "method": "gd",
        "head_entropy": np.zeros((2, 1, 2)).tolist(),
        "stages": [{"stage": "focus", "cycle": 1, "layer": 0, "head": 1}],
        "online": [
            {"event": "focus", "cycle": 1, "layer": 0, "head": 0},
            {"event": "focus", "cycle": 1, "layer": 0, "head": 1},
            {"event": "dilution", "cycle": 2, "layer": 0, "head": 1},
        ],
    }
    old = dict(run, seed=1)
    del old["online"]  # a run cached before the online replay is left out
    table = pl.online_table([run, old])
    assert "| markov-iid | gd | 3-8 | 1 | 2/2 | 1/2 | 0/2 | 0/2 |" in table


def test_the_control_figure_refuses_controls_of_data_it_has_no_runs_of(tmp_path):
    """Controls whose data set has no run (e.g. only ICL-MC cached) are a clear
    error, not an empty grid of panels."""
    icl = [_run("icl-markov", "0 paper", "gd", [])]
    iid = [_run("markov-iid", "0 paper", "gd", [])]
    with pytest.raises(ValueError, match="no run of a data set"):
        pl.control_figure(icl, iid, pl.MARKOV_CONTROLS, tmp_path / "x.png")
