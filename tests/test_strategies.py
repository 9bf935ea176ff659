"""Strategy names become objects in one place (issue 29, point 2): the schedule,
optimizer, model, flow-method and tokeniser objects that the name tables build,
each checked against an independent computation."""

import dataclasses

import jax
import numpy as np
import optax
import pytest

from gflow import AttentionModel, Transformer
from gflow.dynamics import (
    SGD,
    AbstractSchedule,
    Adam,
    AdamW,
    Constant,
    Momentum,
    RMSProp,
    WarmupCosine,
)
from gflow.runs import METHODS, MODELS, OPTIMIZERS, SCHEDULES, TOKENIZERS, Strategies
from gflow.runs.text import TextConfig, text_strategies
from gflow.text import (
    TOKENIZERS as FIXED_TOKENIZERS,
)
from gflow.text import (
    AbstractFlowMethod,
    AbstractTextModel,
    AbstractTokenization,
    DeepText,
    FixedTokenization,
    FullBatchGD,
    IntegratedFlow,
    OneLayerText,
    PositionalAttentionModel,
    SubwordTokenization,
    TextLoss,
    Vocabulary,
    run_full_batch,
)


def test_schedules_are_optax_values_and_their_clock_is_the_running_sum():
    sched = WarmupCosine(0.3, 7, 30, 0.01)
    assert isinstance(sched, AbstractSchedule) and sched.name == "warmup-cosine"
    k = np.arange(31)
    # optax's schedule and the traced rate compiled (not run op by op)
    ref = jax.jit(optax.warmup_cosine_decay_schedule(0.0, 0.3, 7, 30, 0.01))(k)
    np.testing.assert_allclose(sched(k, xp=np), ref, rtol=1e-6, atol=1e-9)
    rate = jax.jit(sched.rate(np.float64))(k)
    np.testing.assert_allclose(rate, ref, rtol=1e-6, atol=1e-9)
    # the clock t_k = Σ_{j<k} η_j, summed here by hand
    eta = [float(sched(j, xp=np)) for j in range(30)]
    hand = np.concatenate([[0.0], np.cumsum(eta)])
    np.testing.assert_allclose(sched.clock(np.array([0, 3, 30])), hand[[0, 3, 30]])
    const = Constant(0.25, 40)
    assert const.rate() == 0.25 and const.name == "constant"
    assert np.all(const(np.arange(40)) == 0.25)  # exactly the step, traced or not
    assert np.all(jax.jit(const)(np.arange(40)) == np.float32(0.25))
    np.testing.assert_array_equal(const.clock(np.array([0, 4])), [0.0, 1.0])
    with pytest.raises(ValueError, match="warmup"):
        WarmupCosine(0.1, 50, 40)


def test_the_schedule_table_builds_the_objects():
    built = SCHEDULES.build("warmup-cosine", 0.1, steps=20, warmup_steps=4, final=0.0)
    assert built == WarmupCosine(0.1, 4, 20, 0.0)
    assert SCHEDULES.build("constant", 0.1, steps=20, warmup_steps=4) == Constant(
        0.1, 20
    )


@pytest.mark.slow  # compiles a model draw or a loop: CI's slow steps
def test_full_batch_loop_with_a_constant_schedule_is_the_plain_step(unchecked):
    windows = np.random.default_rng(0).integers(0, 5, size=(6, 5)).astype(np.int32)
    model = AttentionModel.init(d_vocab=5, d_model=4, key=jax.random.key(0))
    loss = TextLoss(windows, d_vocab=5)
    kw = dict(optimizer=SGD(), steps=5, num_saves=2)
    a = run_full_batch(loss, model, learning_rate=0.2, **kw)
    b = run_full_batch(loss, model, learning_rate=Constant(0.2, 5), **kw)
    np.testing.assert_array_equal(a.metrics["loss"], b.metrics["loss"])
    np.testing.assert_array_equal(a.t, b.t)
    assert b.info["schedule"] == "constant"


@pytest.mark.parametrize(
    "opt, fn, kwargs",
    [
        (SGD(), optax.sgd, {}),
        (Momentum(beta=0.5), optax.sgd, {"momentum": 0.5}),
        (Adam(beta=0.8), optax.adam, {"b1": 0.8}),
        (
            AdamW(beta=0.8, weight_decay=0.3),
            optax.adamw,
            {"b1": 0.8, "weight_decay": 0.3},
        ),
    ],
)
def test_plain_and_injected_rules_step_as_optax(opt, fn, kwargs):
    params = {"w": np.array([1.0, -2.0, 0.5])}
    grads = {"w": np.array([0.3, 0.1, -0.4])}
    ref = fn(learning_rate=0.1, **kwargs)
    want, _ = ref.update(grads, ref.init(params), params)
    for tx in (opt.plain(0.1), opt.transform(0.1)):
        got, _ = tx.update(grads, tx.init(params), params)
        np.testing.assert_allclose(got["w"], want["w"], rtol=1e-6)


def test_optimizers_take_the_settings_they_have():
    settings = dict(beta=0.5, weight_decay=0.2, eps=1e-6)
    assert SGD.from_settings(**settings) == SGD()
    assert AdamW.from_settings(**settings) == AdamW(beta=0.5, weight_decay=0.2)
    assert RMSProp.from_settings(**settings) == RMSProp(beta=0.5, eps=1e-6)
    assert OPTIMIZERS.build("gd", **settings) == SGD()  # gflow text's name for it
    assert "gd" in OPTIMIZERS and "gd" not in list(OPTIMIZERS)


def test_text_strategies_are_built_from_the_names_once():
    cfg = TextConfig(corpus="x", optimizer="adamw", weight_decay=0.3, opt_steps=10)
    got = text_strategies(cfg)
    assert isinstance(got, Strategies)
    assert got.model == OneLayerText(d_model=32, init_scale=1e-3, context=32)
    assert isinstance(got.method, FullBatchGD) and got.method.lr == cfg.lr
    assert got.optimizer == AdamW(weight_decay=0.3)
    assert got.schedule == Constant(cfg.opt_lr, 10)
    assert got.tokenization == FixedTokenization(vocab_size=200, tokenizer="word")
    deep = text_strategies(
        dataclasses.replace(
            cfg, model="transformer", layers=2, heads=2, method="flow", x64=True
        )
    )
    assert isinstance(deep.model, DeepText) and deep.model.layers == 2
    assert isinstance(deep.method, IntegratedFlow) and deep.method.rtol == cfg.rtol
    for table, kind in ((METHODS, AbstractFlowMethod), (MODELS, AbstractTextModel)):
        for name in table:
            assert isinstance(table.build(name), kind)
    for name in TOKENIZERS:
        assert isinstance(TOKENIZERS.build(name, tokenizer=name), AbstractTokenization)


@pytest.mark.slow  # compiles a model draw or a loop: CI's slow steps
def test_model_strategies_draw_the_models_they_name():
    key = jax.random.key(3)
    one = OneLayerText(d_model=4, init_scale=0.1).init(6, key)
    want = AttentionModel.init(
        d_vocab=6, d_model=4, init_scale=0.1, key=key, dtype=np.float32
    )
    for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    pos = OneLayerText(d_model=4, positional=True, context=5).init(6, key)
    assert isinstance(pos, PositionalAttentionModel)
    deep = DeepText(d_model=4, layers=2, heads=2).init(6, key)
    assert isinstance(deep, Transformer) and len(deep.blocks) == 2


def test_tokenizations_cut_as_the_tokenisers_do(tmp_path):
    text = "the cat sat on the mat . the dog sat ."
    toks, vocab, subword = FixedTokenization(vocab_size=4, tokenizer="word").cut(text)
    assert toks == FIXED_TOKENIZERS["word"](text) and subword is None
    assert vocab.tokens == Vocabulary.build(toks, 4).tokens
    pytest.importorskip("tokenizers")
    bad = tmp_path / "tok.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="tokenizer_file"):
        SubwordTokenization(tokenizer_file=str(bad)).cut(text)


@pytest.mark.slow  # compiles a model draw or a loop: CI's slow steps
def test_flow_methods_run_what_they_name(unchecked):
    windows = np.random.default_rng(1).integers(0, 4, size=(5, 4)).astype(np.int32)
    model = AttentionModel.init(
        d_vocab=4, d_model=3, key=jax.random.key(1), dtype=np.float64
    )
    loss = TextLoss(windows, d_vocab=4)
    gd = FullBatchGD(lr=0.01, steps=20, num_saves=2)
    traj = gd.run(loss, model)
    assert gd.checked(loss, traj, 0) is traj  # no sharpness checks asked for
    flow = IntegratedFlow(lr=0.01, steps=20, num_saves=2, solver=None, rtol=1e-9)
    exact = flow.run(loss, model)
    # GD of step 0.01 to t = 0.2 is the flow to first order in η
    gap = abs(traj.metrics["loss"][-1] - exact.metrics["loss"][-1])
    assert exact.t[-1] == pytest.approx(0.2) and 0 < gap < 1e-3
