"""``gflow train`` on a fixed loss (issue 29 point 5): full-batch GD, the optimizer
on the full sample and the gradient flow, on a sample drawn once or on the Markov
population loss, for the attention model or a Transformer; each against a loop
written here."""

import dataclasses

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gflow
from gflow.problems import MarkovChain, Transformer
from gflow.runs import ConfigError, Strategies
from gflow.runs.train import (
    TrainConfig,
    prepare,
    run_train,
    train_strategies,
)
from gflow.text import DeepText, FullBatchOptimizer, OneLayerText, observe_saves

SMALL = dict(
    d_model=4,
    layers=1,
    heads=1,
    seq_len=5,
    windows=8,
    eval_batch=8,
    init_scale=0.3,
    seed=2,
    x64=True,
)


def _tokens(cfg, n, fold):
    chain = MarkovChain.from_lambda(pi=cfg.pi, lam=cfg.lam)
    key = jax.random.fold_in(jax.random.key(cfg.seed), fold)
    return np.asarray(chain.sample(key=key, batch=n, length=cfg.seq_len + 1))


def _hand_loop(cfg, tx):
    """``cfg.steps`` steps of ``tx`` on the sample of ``cfg.windows`` sequences
    from the Transformer drawn eagerly: (train losses, final model)."""
    model = Transformer.init(
        d_vocab=len(cfg.pi),
        d_model=cfg.d_model,
        key=jax.random.key(cfg.seed),
        init_scale=cfg.init_scale,
        dtype=jnp.float64,
    )
    tokens = _tokens(cfg, cfg.windows, 3)  # the fixed sample, apart from the rest

    def loss(m):
        return gflow.sequence_loss(m, tokens)

    @jax.jit
    def step(model, state):
        value, grad = jax.value_and_grad(loss)(model)
        updates, state = tx.update(grad, state, model)
        return value, optax.apply_updates(model, updates), state

    state = tx.init(model)
    losses = []
    for _ in range(cfg.steps):
        value, model, state = step(model, state)
        losses.append(float(value))
    losses.append(float(loss(model)))
    return np.asarray(losses), model


@pytest.mark.parametrize(
    "settings, tx",
    [
        (dict(method="gd", lr=0.5), optax.sgd(0.5)),
        pytest.param(  # slow: the gd case keeps the hand-loop oracle by default
            dict(optimizer="adam", batch=0, lr=0.05, schedule="warmup-cosine"),
            # warmup max(1, round(0.1 * 6)) = 1 step, then the cosine to 0; optax
            # evaluates a schedule at its int32 count, in float32 unless cast
            optax.adam(
                lambda n: optax.warmup_cosine_decay_schedule(0.0, 0.05, 1, 6, 0.0)(
                    n.astype(np.float64)
                )
            ),
            marks=pytest.mark.slow,
        ),
    ],
    ids=["gd", "adam-full-batch"],
)
def test_a_full_batch_run_is_the_hand_loop_on_its_fixed_sample(settings, tx, tmp_path):
    cfg = TrainConfig(**SMALL, steps=6, num_saves=4, **settings)
    data = prepare(cfg)
    traj = run_train(cfg, data, checkpoint_dir=tmp_path)
    losses, final = _hand_loop(cfg, tx)
    # saves at steps 0, 2, 4 and 6 (num_saves − 1 = 3 evenly, then the last)
    np.testing.assert_allclose(traj.metrics["train_loss"], losses[::2], rtol=1e-10)
    for a, b in zip(jax.tree.leaves(traj.final), jax.tree.leaves(final)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    held_out = gflow.sequence_loss(final, _tokens(cfg, cfg.eval_batch, 1))
    np.testing.assert_allclose(traj.metrics["loss"][-1], held_out, rtol=1e-10)
    assert traj.metrics["head_entropy"].shape == (4, 1, 1)
    if cfg.method == "gd":  # the clock: t = k·η
        np.testing.assert_allclose(traj.t, [0.0, 1.0, 2.0, 3.0])
    assert traj.info["method"] == cfg.method
    # a second call reads the one piece back instead of computing it
    again = run_train(cfg, data, checkpoint_dir=tmp_path, read_only=True)
    assert again.stats["resumed_pieces"] == 1
    np.testing.assert_array_equal(again.metrics["loss"], traj.metrics["loss"])


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_the_population_flow_is_the_flow_of_the_population_loss(tmp_path):
    cfg = TrainConfig(
        **{**SMALL, "layers": 1, "heads": 1},
        model="attention",
        population=True,
        method="flow",
        solver="tsit5",
        lr=0.5,
        steps=4,
        num_saves=3,
    )
    traj = run_train(cfg, prepare(cfg), checkpoint_dir=tmp_path)
    chain = MarkovChain.from_lambda(pi=cfg.pi, lam=cfg.lam)
    model = gflow.AttentionModel.init(
        d_vocab=4,
        d_model=cfg.d_model,
        init_scale=cfg.init_scale,
        key=jax.random.key(cfg.seed),
        dtype=jnp.float64,
    )
    flow = gflow.solve_flow(
        gflow.PopulationLoss(chain),
        model,
        t1=2.0,  # steps·lr
        ts=np.linspace(0.0, 2.0, 3),
        solver=diffrax.Tsit5(),
        rtol=cfg.rtol,
        atol=cfg.atol,
        progress=False,
    )
    np.testing.assert_allclose(traj.t, [0.0, 1.0, 2.0])
    np.testing.assert_allclose(
        traj.metrics["train_loss"], flow.metrics["loss"], rtol=1e-10
    )
    assert traj.metrics["train_loss"][-1] < traj.metrics["train_loss"][0]
    assert isinstance(traj.final, gflow.AttentionModel)


def test_strategies_name_the_model_and_the_method():
    cfg = TrainConfig(model="attention", max_len=64, layers=1, heads=1, batch=0)
    strategies = train_strategies(cfg)
    assert isinstance(strategies, Strategies)
    assert isinstance(strategies.model, OneLayerText)
    assert strategies.model.positions == 64  # learned positions: max_len
    method = strategies.method
    assert isinstance(method, FullBatchOptimizer)
    assert (method.steps, method.num_saves) == (cfg.steps, cfg.num_saves - 1)
    assert method.optimizer == gflow.dynamics.AdamW(beta=0.9, weight_decay=0.01)
    flow = train_strategies(TrainConfig(method="flow", max_steps=7, x64=True)).method
    assert flow.max_steps == 7 and flow.float64 and not flow.optimizer_run
    assert (flow.progress, flow.shown().progress) == (False, None)  # None: a tty
    assert strategies.method.shown() is strategies.method  # no progress of its own
    deep = train_strategies(TrainConfig(residual=True, layernorm=True, d_ff=8))
    assert deep.model == DeepText(
        d_model=16,
        init_scale=0.02,
        layers=2,
        heads=2,
        d_ff=8,
        layernorm=True,
        residual=True,
    )


@pytest.mark.parametrize(
    "settings, field",
    [
        (dict(model="attention"), "model"),  # two layers by default in Python
        (dict(population=True), "population"),
        (dict(population=True, batch=0, data="icl-markov"), "population"),
        (dict(population=True, batch=0, layers=1, heads=1), "population"),  # deep
        (
            dict(population=True, batch=0, model="attention", layers=1, heads=1)
            | dict(max_len=64),  # positions: no population loss
            "population",
        ),
        (dict(method="flow", schedule="warmup-cosine", x64=True), "schedule"),
        (dict(batch=0, optimizer="momentum"), "optimizer"),
        (dict(method="flow"), "x64"),  # complete() sets it; the class alone refuses
        (dict(windows=0), "windows"),
        (dict(method="flow", x64=True, max_steps=0), "max_steps"),
        (dict(method="walk"), "method"),
    ],
)
def test_settings_that_cannot_train_are_refused(settings, field):
    with pytest.raises(ConfigError, match=f"^{field}:"):
        TrainConfig(**settings)


def test_the_attention_model_is_one_layer_one_head_unless_told_otherwise():
    cfg = TrainConfig.from_json({"model": "attention", "method": "flow"})
    assert (cfg.layers, cfg.heads, cfg.x64) == (1, 1, True)
    with pytest.raises(ConfigError, match="drop layers"):
        TrainConfig.from_json({"model": "attention", "layers": 2})


def test_observed_saves_are_nan_after_a_divergence():
    params = jnp.arange(6.0).reshape(3, 2)  # three saves of a two-number "model"
    traj = gflow.Trajectory(
        t=np.arange(3.0),
        metrics={"loss": np.array([1.0, 2.0, np.nan])},
        final=params[-1],
        params=params,
    )
    out = observe_saves(lambda m: {"s": m.sum(), "n": jnp.int32(1)}, traj)
    np.testing.assert_array_equal(out["s"][:2], [1.0, 5.0])
    assert np.isnan(out["s"][2]) and np.isnan(out["n"][2])  # ints become floats


def test_text_transformers_take_the_same_parts():
    from gflow.runs.text import TextConfig, text_strategies

    cfg = TextConfig(corpus="x", model="transformer", residual=True, d_ff=8)
    model = text_strategies(cfg).model
    assert dataclasses.replace(model, residual=False, d_ff=None) == DeepText(
        d_model=32, init_scale=1e-3, context=32
    )
    with pytest.raises(ConfigError, match="parts of --model transformer"):
        TextConfig(corpus="x", layernorm=True)


def test_a_float64_run_without_jax_float64_is_refused(tmp_path):
    cfg = TrainConfig(**SMALL, steps=2, num_saves=2, method="gd")
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(ValueError, match="jax_enable_x64"):
            run_train(cfg, prepare(cfg), checkpoint_dir=tmp_path)
    finally:
        jax.config.update("jax_enable_x64", True)


def test_a_positional_attention_model_run_is_saved_and_read_back(tmp_path):
    """gflow train --model attention --max-len: its trajectory files hold a
    PositionalAttentionModel, read back with the same weights."""
    from gflow.runs import load_trajectory, save_trajectory
    from gflow.text import PositionalAttentionModel

    model = PositionalAttentionModel.init(
        d_vocab=3, d_model=2, context_length=5, init_scale=0.5, key=jax.random.key(0)
    )
    snaps = jax.tree.map(lambda x: jnp.stack([x, 2 * x]), model)
    traj = gflow.Trajectory(
        t=np.arange(2.0), metrics={"loss": np.ones(2)}, final=model, params=snaps
    )
    save_trajectory(tmp_path, traj, name="train")
    back = load_trajectory(tmp_path, name="train")
    assert isinstance(back.final, PositionalAttentionModel)
    for a, b in zip(jax.tree.leaves(back.params), jax.tree.leaves(snaps)):
        np.testing.assert_array_equal(a, b)


# both cases in CI's slow steps: the default run holds the same oracle for every
# attention model, residual or not (tests/test_invariants.py: row q of causal_logits
# is the model on the context cut after q; sequence_loss's all-positions loss is the
# mean cross-entropy of those rows), compiled once per model instead of per prefix
@pytest.mark.slow
@pytest.mark.parametrize("residual", [False, True])
def test_the_attention_models_causal_logits_are_its_outputs_on_each_prefix(residual):
    """AttentionModel.causal_logits (ICL-MC's strategy distances read it): row q is
    the model on the context cut after q, and the causal loss is sequence_loss's."""
    model = gflow.AttentionModel.init(
        d_vocab=3, d_model=4, init_scale=0.7, residual=residual, key=jax.random.key(2)
    )
    context = jnp.array([0, 2, 1, 1, 0])
    rows = model.causal_logits(context)
    for q in range(5):
        np.testing.assert_allclose(rows[q], model(context[: q + 1]), rtol=1e-12)
    tokens = jnp.array([[0, 2, 1, 1, 0, 2]])
    logp = jax.nn.log_softmax(model.causal_logits(tokens[0, :-1]))
    want = -jnp.mean(logp[jnp.arange(5), tokens[0, 1:]])
    got = gflow.sequence_loss(model, tokens, all_positions=True)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def _add_one_unigram_loss(tokens, d_vocab):
    """The probe's unigram loss written out in numpy: counts of the context
    tokens plus one, normalised; the mean surprisal of the last tokens."""
    tokens = np.asarray(tokens)
    counts = np.bincount(tokens[:, :-1].ravel(), minlength=d_vocab) + 1.0
    return float(-np.mean(np.log(counts / counts.sum())[tokens[:, -1]]))


def test_the_gate_reference_is_the_held_out_samples_own_unigram_loss(tmp_path):
    """``prepare`` gives the stage rules' information gate the held-out sample's
    own add-one unigram loss (the monitor's reference), on a named data set and
    on a text corpus; the training distribution's entropy (``unigram_loss``)
    differs from it by the sample's composition.

    Catches the gate read against the training distribution's entropy again
    (docs/stage_rules.md: 0.07 nats on the chain's 128-token probe)."""
    cfg = TrainConfig(**SMALL, steps=6, num_saves=2)
    data = prepare(cfg)
    want = _add_one_unigram_loss(data.eval_tokens, data.d_vocab)
    assert data.references["probe_unigram_loss"] == pytest.approx(want, rel=1e-6)
    assert abs(want - data.references["unigram_loss"]) > 1e-3

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat and the dog sat on the log. " * 40)
    text = prepare(TrainConfig(**SMALL, steps=6, num_saves=2, data=str(corpus)))
    want = _add_one_unigram_loss(text.eval_tokens, text.d_vocab)
    assert text.references["probe_unigram_loss"] == pytest.approx(want, rel=1e-6)
