"""Positional option, text loss and text observables (gflow.text)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gflow import AttentionModel, sequence_loss
from gflow.analysis import entropy
from gflow.text import (
    PositionalAttentionModel,
    TextLoss,
    TextObservables,
    Vocabulary,
    WordTokenizer,
    default_queries,
    fixed_sample,
    text_loss,
    type_attention,
    window_attention,
)

D, M, S = 7, 5, 6


@pytest.fixture(scope="module")
def windows():
    rng = np.random.default_rng(0)
    return jnp.asarray(rng.integers(0, D, size=(20, S + 1)), dtype=jnp.int32)


@pytest.fixture(scope="module")
def model():
    return AttentionModel.init(
        d_vocab=D, d_model=M, init_scale=0.7, key=jax.random.key(3)
    )


def test_positional_with_zero_positions_is_the_base_model(model, windows):
    pm = PositionalAttentionModel(base=model, W_pos=jnp.zeros((S, M)))
    both = eqx.filter_jit(
        lambda a, b, w: [
            (
                sequence_loss(a, w, all_positions=p, dense=False),
                text_loss(b, w, all_positions=p),
            )
            for p in (False, True)
        ]
    )
    for ref, got in both(model, pm, windows):
        np.testing.assert_allclose(got, ref, rtol=1e-12)
    with pytest.raises(ValueError, match="d×d"):
        text_loss(pm, windows, dense=True)


def test_positional_encoding_matters_and_gets_gradient(model, windows):
    pm = PositionalAttentionModel.init(
        context_length=S, d_vocab=D, d_model=M, init_scale=0.7, key=jax.random.key(4)
    )
    loss = TextLoss(windows)
    g = eqx.filter_jit(eqx.filter_grad(loss))(pm)
    assert float(jnp.abs(g.W_pos).max()) > 1e-6
    # Finite-difference check of dL/dW_pos[0, 0] (float64).
    h = 1e-6
    bump = lambda e: eqx.tree_at(lambda p: p.W_pos, pm, pm.W_pos.at[0, 0].add(e))
    jloss = eqx.filter_jit(loss)
    fd = (jloss(bump(h)) - jloss(bump(-h))) / (2 * h)
    np.testing.assert_allclose(g.W_pos[0, 0], fd, rtol=1e-5)
    # Hand-written attention with positions.
    c = windows[0, :-1]
    emb = pm.base.W_E[c] + pm.W_pos
    ref = jax.nn.softmax((emb[-1] @ pm.base.W_A) @ emb.T)
    np.testing.assert_allclose(pm.attention(c), ref, rtol=1e-12)


def test_window_attention_matches_the_model(model, windows):
    @eqx.filter_jit
    def both(model, c):
        # The attention-weighted embedding through W_P gives the model's logits.
        attn = window_attention(model, c)
        logits = jnp.einsum("ns,nsm->nm", attn, model.W_E[c]) @ model.W_P
        return logits, jax.vmap(model)(c)

    logits, ref = both(model, windows[:, :-1])
    np.testing.assert_allclose(logits, ref, rtol=1e-10)


def test_type_attention_and_query_rows():
    # Zero weights: uniform attention over positions, so w_n[k] = count_k / s.
    model = AttentionModel.init(
        d_vocab=4, d_model=3, init_scale=1e-3, key=jax.random.key(0)
    )
    model = jax.tree.map(jnp.zeros_like, model)
    windows = jnp.array([[0, 0, 1, 2, 3], [1, 1, 1, 2, 0], [3, 0, 0, 2, 1]])
    c = windows[:, :-1]
    w = eqx.filter_jit(lambda m: type_attention(window_attention(m, c), c, 4))(model)
    np.testing.assert_allclose(w[0], [0.5, 0.25, 0.25, 0])
    np.testing.assert_allclose(w.sum(axis=1), 1.0)
    obs = eqx.filter_jit(TextObservables(windows, queries=[2, 3], top=[0, 1]))(model)
    # Query 2 ends windows 0, 1 and 2: its row is the mean of their w_n.
    np.testing.assert_allclose(obs["attention_rows"][0], w.mean(axis=0), rtol=1e-12)
    assert np.all(np.isnan(obs["attention_rows"][1]))  # query 3 ends no window
    np.testing.assert_allclose(obs["query_entropy"][0], entropy(w.mean(axis=0)))
    np.testing.assert_allclose(obs["query_on_top1"][0], w.mean(axis=0)[0])
    np.testing.assert_allclose(obs["query_on_topk"][0], w.mean(axis=0)[:2].sum())
    np.testing.assert_allclose(obs["query_on_self"][0], w.mean(axis=0)[2])
    np.testing.assert_allclose(obs["attention_entropy"], jnp.mean(entropy(w)))


def test_observables_jit_and_positional(model, windows):
    pm = PositionalAttentionModel(base=model, W_pos=jnp.zeros((S, M)))
    obs = TextObservables(windows, queries=[1, 2], top=[0, 1, 2])
    a = eqx.filter_jit(obs)(model)
    b = eqx.filter_jit(obs)(pm)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-10, err_msg=k)
    assert a["sv_W_E"].shape == (4,)


def test_default_queries_are_mid_frequency_words():
    rng = np.random.default_rng(0)
    words = [chr(97 + i // 26) + chr(97 + i % 26) for i in range(60)]
    p = 1.0 / np.arange(1, 61)
    text = " ".join(rng.choice(words, size=20000, p=p / p.sum()))
    toks = WordTokenizer()(text)
    vocab = Vocabulary.build(toks, size=40)
    w = fixed_sample(vocab.encode(toks), length=8, num=2000)
    q = default_queries(vocab, w, num=4)
    assert 1 <= len(q) <= 4 and len(set(q)) == len(q)
    assert all(5 <= i <= len(vocab) for i in q)


@pytest.mark.slow
def test_counts_form_equals_sequence_loss_and_scatter_attention(model, windows):
    from gflow.text import counts_loss, window_log_counts

    lc = jnp.asarray(window_log_counts(windows, D))
    res = AttentionModel.init(
        d_vocab=D, d_model=M, init_scale=0.7, key=jax.random.key(5), residual=True
    )

    @eqx.filter_jit
    def pair(m):
        a = counts_loss(m, lc, windows)
        b = sequence_loss(m, windows, dense=False)
        ga = eqx.filter_grad(lambda q: counts_loss(q, lc, windows))(m)
        gb = eqx.filter_grad(lambda q: sequence_loss(q, windows, dense=False))(m)
        return a, b, ga, gb

    for m in (model, res):
        a, b, ga, gb = pair(m)
        np.testing.assert_allclose(a, b, rtol=1e-12)
        for x, y in zip(jax.tree.leaves(ga), jax.tree.leaves(gb)):
            np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-12)
    ref = sequence_loss(model, windows, dense=False)
    np.testing.assert_allclose(TextLoss(windows, d_vocab=D)(model), ref, rtol=1e-12)
    # The counts form is chosen where it is cheaper (d <= 8 s), or when forced.
    assert TextLoss(windows, d_vocab=D).log_counts is not None
    assert TextLoss(windows, d_vocab=8 * S + 1).log_counts is None
    assert TextLoss(windows, d_vocab=8 * S + 1, counts=True).log_counts is not None
    fast = TextObservables(windows, [1, 2], [0, 1], d_vocab=D)
    slow = TextObservables(windows, [1, 2], [0, 1])
    f, s = eqx.filter_jit(fast)(model), eqx.filter_jit(slow)(model)
    for k in f:
        np.testing.assert_allclose(f[k], s[k], rtol=1e-10, err_msg=k)


@pytest.mark.slow
def test_full_batch_loop_matches_optax_and_snapshot_observables(model, windows):
    """GD and Adam of the shared loop equal optax.sgd/adam step by step, and the
    observables from its snapshots equal the observables evaluated on the model of
    that step (what the loop used to compute inside)."""
    import optax

    from gflow.dynamics import SGD, Adam
    from gflow.text import observe_snapshots, run_full_batch

    loss = TextLoss(windows, d_vocab=D)
    obs = TextObservables(windows, [1, 2], [0, 1], d_vocab=D)
    value_grad = eqx.filter_jit(eqx.filter_value_and_grad(loss))
    obs_jit = eqx.filter_jit(obs)
    for method, opt, lr in (
        (SGD(), optax.sgd(0.3), 0.3),
        (Adam(), optax.adam(0.05), 0.05),
    ):
        got = run_full_batch(
            loss, model, optimizer=method, learning_rate=lr, steps=7, num_saves=3
        )
        snap = observe_snapshots(obs, got.params)
        update = jax.jit(opt.update)
        m, state = model, opt.init(model)
        for k in range(8):  # saves at steps 0, 2, 4 and 7
            value, g = value_grad(m)
            if k in (0, 2, 4, 7):
                i = (0, 2, 4, 7).index(k)
                np.testing.assert_allclose(got.t[i], k * lr, rtol=1e-12)
                np.testing.assert_allclose(got.metrics["loss"][i], value, rtol=1e-10)
                norm = np.sqrt(sum(np.sum(x**2) for x in jax.tree.leaves(g)))
                np.testing.assert_allclose(got.metrics["grad_norm"][i], norm, rtol=1e-9)
                ref = obs_jit(m)
                for key, v in snap.items():
                    np.testing.assert_allclose(v[i], ref[key], rtol=1e-9, err_msg=key)
            if k < 7:
                u, state = update(g, state, m)
                m = optax.apply_updates(m, u)
        for a, b in zip(jax.tree.leaves(got.final), jax.tree.leaves(m)):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-14)


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_full_batch_loop_stops_on_divergence(model, windows):
    from gflow.dynamics import SGD
    from gflow.text import run_full_batch

    traj = run_full_batch(
        TextLoss(windows, d_vocab=D),
        model,
        optimizer=SGD(),
        learning_rate=1e9,
        steps=7,
        num_saves=3,
    )  # the shapes of the test above: its compiled loop is reused
    assert traj.status == "diverged"
    k = traj.stats["diverged_step"]
    saved = np.array([0, 2, 4, 7])
    assert np.all(np.isnan(traj.metrics["loss"][saved > k]))
    assert np.isfinite(traj.metrics["loss"][0])


def test_full_batch_arrays_vmap_over_inits_matches_run_full_batch(windows):
    """The public loop behind ``run_full_batch`` (``benchmarks/text_seeds.py``
    vmaps it over seeds): under ``jax.vmap`` each init's saves equal its own run."""
    from gflow.dynamics import Adam
    from gflow.text import full_batch_arrays, run_full_batch

    loss = TextLoss(windows, d_vocab=D)
    run = dict(optimizer=Adam(), learning_rate=0.05, steps=3, num_saves=2)
    models = [
        AttentionModel.init(d_vocab=D, d_model=M, init_scale=0.7, key=jax.random.key(s))
        for s in (1, 2)
    ]
    params = [eqx.partition(m, eqx.is_inexact_array)[0] for m in models]
    static = eqx.partition(models[0], eqx.is_inexact_array)[1]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *params)

    @eqx.filter_jit
    def vmapped(stacked):
        return jax.vmap(
            lambda p: full_batch_arrays(loss, eqx.combine(p, static), **run)
        )(stacked)

    losses, norms, snaps, final, diverged = vmapped(stacked)
    assert losses.shape == norms.shape == (2, 3)  # saves at steps 0, 1 and 3
    np.testing.assert_array_equal(diverged, [-1, -1])
    for i, m in enumerate(models):
        one = run_full_batch(loss, m, **run)
        np.testing.assert_allclose(losses[i], one.metrics["loss"], rtol=1e-5)
        np.testing.assert_allclose(norms[i], one.metrics["grad_norm"], rtol=1e-5)
        np.testing.assert_allclose(snaps.W_E[i], one.params.W_E, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(final.W_E[i], one.final.W_E, rtol=1e-5, atol=1e-7)


def test_full_batch_loop_refuses_other_optimizers(model, windows, unchecked):
    from gflow.dynamics import Momentum
    from gflow.text import run_full_batch

    with pytest.raises(ValueError, match="optimizer must be"):
        run_full_batch(
            TextLoss(windows),
            model,
            optimizer=Momentum(),
            learning_rate=0.1,
            steps=2,
            num_saves=1,
        )
