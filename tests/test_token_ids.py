"""Token ids out of the vocabulary (issue 33, point 3).

Outside jit every loss and data entry point that takes tokens raises a ValueError
naming the id, its batch row and position, and the range 0 .. d_vocab-1. Inside jit
(traced tokens) the loss is NaN for a bad id, so a run ends ``diverged``, and for
good ids the guarded loss and gradient have the bits of the unguarded ones (the same
function with the tokens closed over: checked while tracing, no guard).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gflow import (
    AttentionModel,
    Monitor,
    SequenceLoss,
    Transformer,
    run_minibatch,
    run_optimizer,
    sequence_loss,
)
from gflow.text import (
    PositionalAttentionModel,
    TextLoss,
    WindowStream,
    fixed_sample,
    query_windows,
    text_loss,
)
from gflow.text import run_minibatch as run_text_minibatch

D, M, S = 4, 4, 3  # vocabulary, width, context length
GOOD = np.array([[0, 1, 2, 3], [3, 2, 1, 0], [1, 1, 0, 2]], np.int32)  # [3, S+1]


def _bad(row, pos, value, tokens=GOOD):
    t = tokens.copy()
    t[row, pos] = value
    return t


BAD = {  # (tokens, the text every message must hold)
    "target = d": (_bad(1, 3, D), "token id 4 at batch row 1, position 3 (the target)"),
    "context = d": (_bad(2, 1, D), "token id 4 at batch row 2, position 1 (context)"),
    "context = -1": (_bad(0, 0, -1), "token id -1 at batch row 0, position 0"),
}


def _models():
    key = jax.random.key(0)
    return {
        "attention dense": (AttentionModel.init(d_vocab=D, d_model=M, key=key), True),
        "attention gathered": (
            AttentionModel.init(d_vocab=D, d_model=M, key=key),
            False,
        ),
        "transformer": (Transformer.init(d_vocab=D, d_model=M, key=key), None),
        "positional": (
            PositionalAttentionModel.init(
                context_length=S, d_vocab=D, d_model=M, key=key
            ),
            None,
        ),
    }


MODELS = _models()


def _loss(name, tokens, all_positions=False):
    model, dense = MODELS[name]
    if name == "positional":
        return text_loss(model, tokens, all_positions=all_positions)
    return sequence_loss(model, tokens, all_positions=all_positions, dense=dense)


@pytest.mark.parametrize("bad", list(BAD))
@pytest.mark.parametrize("name", list(MODELS))
def test_an_out_of_range_id_raises_naming_it_and_its_position(name, bad):
    tokens, where = BAD[bad]
    with pytest.raises(ValueError, match=r"0 \.\. 3 \(d_vocab = 4\)") as e:
        _loss(name, tokens)
    assert where in str(e.value)
    # the same for a jax array, and for text_loss on every model
    with pytest.raises(ValueError, match="out of range"):
        text_loss(MODELS[name][0], jnp.asarray(tokens))


def test_the_first_bad_id_is_named_with_the_count():
    tokens = _bad(2, 3, 7, _bad(0, 2, 9))
    with pytest.raises(ValueError, match="token id 9 at batch row 0, position 2") as e:
        sequence_loss(MODELS["transformer"][0], tokens)
    assert "2 of 12 ids" in str(e.value)


def test_float_tokens_are_refused(unchecked):
    with pytest.raises(TypeError, match="integer token ids"):
        sequence_loss(MODELS["transformer"][0], GOOD.astype(float))


def test_the_loss_objects_check_their_tokens_when_made():
    tokens, where = BAD["target = d"]
    for make in (SequenceLoss, TextLoss):
        with pytest.raises(ValueError, match=r"0 \.\. 3") as e:
            make(tokens, d_vocab=D)
        assert where in str(e.value)
        with pytest.raises(ValueError, match="must be >= 0"):
            make(BAD["context = -1"][0])  # negative ids need no vocabulary size
        make(tokens)  # without d_vocab an id >= 0 is checked when called
    model = MODELS["attention dense"][0]
    for loss in (SequenceLoss(tokens), TextLoss(tokens, d_vocab=8)):
        with pytest.raises(ValueError, match="token id 4 at batch row 1, position 3"):
            loss(model)  # called outside jit: the model's vocabulary


def test_windows_and_streams_check_the_corpus_ids():
    ids = np.array([0, 1, 2, 3, 0, 1, 5, 2, 1, 0], np.int32)
    with pytest.raises(ValueError, match=r"token id 5 at position 6 .* 0 \.\. 3"):
        fixed_sample(ids, length=S, num=2, d_vocab=D)
    with pytest.raises(ValueError, match="token id 5 at position 6"):
        WindowStream(ids, length=S, batch=2, d_vocab=D)
    with pytest.raises(ValueError, match="token id 5 at position 6"):
        query_windows(ids, [1], length=S, per_query=1, d_vocab=D)
    neg = ids.copy()
    neg[3] = -2
    with pytest.raises(ValueError, match="token id -2 at position 3 .* >= 0"):
        fixed_sample(neg, length=S, num=2)
    assert fixed_sample(ids, length=S, num=2, d_vocab=6).shape == (2, S + 1)


def test_the_monitor_checks_its_probe(tmp_path):
    model = MODELS["attention dense"][0]
    tokens, where = BAD["target = d"]
    with Monitor(tmp_path / "a", every=1, verbose=False) as mon:
        with pytest.raises(ValueError, match=r"probe: .*0 \.\. 3") as e:
            mon.observe(0, model, tokens)
        assert where in str(e.value)
    with Monitor(tmp_path / "b", every=1, verbose=False) as mon:
        mon.observe(0, model, GOOD)
        with pytest.raises(ValueError, match="token id 4 at batch row 2, position 1"):
            mon.observe(1, model, BAD["context = d"][0])  # a new probe object


# ---- inside jit ---------------------------------------------------------------------


@eqx.filter_jit
def _guarded(name, tokens, all_positions):
    """The loss and gradient with the tokens traced (the guard applies)."""
    model = MODELS[name][0]
    return eqx.filter_value_and_grad(
        lambda m: _loss_on(name, m, tokens, all_positions)
    )(model)


def _loss_on(name, model, tokens, all_positions):
    dense = MODELS[name][1]
    if name == "positional":
        return text_loss(model, tokens, all_positions=all_positions)
    return sequence_loss(model, tokens, all_positions=all_positions, dense=dense)


def _unguarded(name, tokens, all_positions):
    """The same program with the tokens closed over: checked while tracing."""
    model = MODELS[name][0]
    fn = eqx.filter_value_and_grad(
        lambda m: _loss_on(name, m, jnp.asarray(tokens), all_positions)
    )
    return eqx.filter_jit(fn)(model)


# the all-positions loss is the same guard on another gather: slow (CI runs it)
@pytest.mark.parametrize(
    "all_positions", [False, pytest.param(True, marks=pytest.mark.slow)]
)
@pytest.mark.parametrize("name", list(MODELS))
def test_under_jit_a_bad_id_gives_nan_and_good_ids_the_same_bits(name, all_positions):
    loss, grad = _guarded(name, jnp.asarray(GOOD), all_positions)
    ref_loss, ref_grad = _unguarded(name, GOOD, all_positions)
    np.testing.assert_array_equal(loss, ref_loss)
    for a, b in zip(jax.tree.leaves(grad), jax.tree.leaves(ref_grad)):
        np.testing.assert_array_equal(a, b)
    for bad, (tokens, _) in BAD.items():
        loss, _ = _guarded(name, jnp.asarray(tokens), all_positions)
        assert np.isnan(loss), bad


def test_the_counts_form_of_text_loss_is_guarded_under_jit():
    model = MODELS["attention dense"][0]
    good = TextLoss(GOOD, d_vocab=D, counts=True)
    assert good.log_counts is not None  # the counts form
    # a traced loss object: its windows are traced
    value = eqx.filter_jit(lambda loss, m: loss(m))
    np.testing.assert_array_equal(
        value(good, model), eqx.filter_jit(lambda m: good(m))(model)
    )
    # windows swapped in after the check (as a traced loss object's could be)
    for tokens, _ in BAD.values():
        bad = eqx.tree_at(lambda loss: loss.tokens, good, jnp.asarray(tokens))
        assert np.isnan(value(bad, model))


def test_gradient_descent_on_bad_tokens_under_jit_diverges():
    model = MODELS["attention dense"][0]
    # one optimizer object for both runs: it is static in the compiled loop, which
    # the two runs then share (their tokens are traced)
    kw = dict(optimizer=optax.sgd(0.1), steps=4, save_every=2, learning_rate=0.1)
    good = run_optimizer(SequenceLoss(GOOD), model, **kw)
    assert good.status == "success"
    traj = run_optimizer(SequenceLoss(BAD["target = d"][0]), model, **kw)
    assert traj.status == "diverged" and traj.stats["diverged_step"] == 0


@pytest.mark.parametrize("text", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_a_minibatch_run_on_a_stream_of_bad_ids_diverges(text):
    """A stream whose corpus holds an id the model does not have: the step's loss
    is NaN, whichever batch loss (the text runs' counts form included)."""
    model = MODELS["attention dense"][0]
    ids = np.tile(np.arange(D + 1, dtype=np.int32), 6)  # holds the id D
    stream = WindowStream(ids, length=S, batch=4)
    kw = dict(steps=4, learning_rate=0.1, key=jax.random.key(0), save_every=2)
    eval_loss = SequenceLoss(GOOD)
    if text:
        traj = run_text_minibatch(eval_loss, model, optax.sgd(0.1), stream, **kw)
    else:
        traj = run_minibatch(
            eval_loss, model, optax.sgd(0.1), stream, batch_loss=sequence_loss, **kw
        )
    assert traj.status == "diverged" and traj.stats["diverged_step"] == 0
