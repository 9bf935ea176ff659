"""Per-head observables, stages and figures of the deep Transformer (issue 14):
known answers (uniform attention, a hand-built one-layer model, NumPy oracles), the
observables inside a flow and under vmap, and the per-head stage rules on
constructed signals with closed-form stage edges."""

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from matplotlib.image import imread

import gflow
from gflow import AttentionModel, MarkovChain
from gflow.analysis import (
    HeadObservables,
    HeadStage,
    StageDetector,
    detect_head_stages,
    head_attention_entropy,
)
from gflow.dynamics import Trajectory
from gflow.plotting import plot_attention_maps, plot_head_entropy
from gflow.problems import Transformer, product_singular_values

CHAIN = MarkovChain.from_lambda(pi=(0.6, 0.25, 0.1, 0.05), lam=0.5)
OPTIONS = dict(d_ff=8, value=True, layernorm=True, residual=True, max_len=16)


def _tokens(seed=0, batch=8, length=7):
    return CHAIN.sample(key=jax.random.key(seed), batch=batch, length=length)


def _deep(key=1, **kw):
    opts = dict(OPTIONS, **kw)
    return Transformer.init(
        d_vocab=4,
        d_model=4,
        n_layers=2,
        n_heads=2,
        init_scale=0.5,
        key=jax.random.key(key),
        **opts,
    )


def _entropy(p):
    p = np.asarray(p, float)
    return float(-np.sum(p[p > 0] * np.log(p[p > 0])))


def _oracle(attn, contexts, top, tracked):
    """Loops over contexts and query positions: the definitions, one at a time.

    attn [b, l, h, s, s] (NumPy), contexts [b, s]."""
    attn, contexts = np.asarray(attn, float), np.asarray(contexts)
    b, n_layers, n_heads, s, _ = attn.shape
    out = {
        "head_entropy": np.zeros((n_layers, n_heads)),
        "head_on_top": np.zeros((n_layers, n_heads)),
        "head_tracked_on_top": np.zeros((n_layers, n_heads, len(tracked))),
        "head_self": np.zeros((n_layers, n_heads)),
    }
    for layer in range(n_layers):
        for head in range(n_heads):
            rows = attn[:, layer, head]
            out["head_entropy"][layer, head] = np.mean(
                [_entropy(rows[n, -1]) for n in range(b)]
            )
            top_vals, self_vals = [], []
            per_q = [[] for _ in tracked]
            for n in range(b):
                for i in range(s):
                    x = contexts[n]
                    mass_top = sum(rows[n, i, j] for j in range(i + 1) if x[j] == top)
                    if x[i] == top:
                        top_vals.append(mass_top)
                    if x[i] in tracked:
                        self_vals.append(
                            sum(rows[n, i, j] for j in range(i + 1) if x[j] == x[i])
                        )
                    for qi, q in enumerate(tracked):
                        if x[i] == q:
                            per_q[qi].append(mass_top)
            out["head_on_top"][layer, head] = np.mean(top_vals) if top_vals else 0.0
            out["head_self"][layer, head] = np.mean(self_vals) if self_vals else 0.0
            for qi, vals in enumerate(per_q):
                out["head_tracked_on_top"][layer, head, qi] = (
                    np.mean(vals) if vals else 0.0
                )
    return out


# ---------------------------------------------------------------- observables


@pytest.mark.slow
def test_uniform_attention_has_entropy_log_position():
    """All-zero W_Q: every row i is uniform over positions 0..i, entropy log(i+1);
    the last row's is log s in every layer and head, whatever the other options."""
    model = _deep()
    model = eqx.tree_at(
        lambda m: [b.W_Q for b in m.blocks],
        model,
        [jnp.zeros_like(b.W_Q) for b in model.blocks],
    )
    tokens = _tokens()
    s = tokens.shape[1] - 1
    attn = np.asarray(model.attention(tokens[0, :-1]))
    for i in range(s):
        np.testing.assert_allclose(attn[:, :, i, : i + 1], 1.0 / (i + 1), rtol=1e-12)
        np.testing.assert_array_equal(attn[:, :, i, i + 1 :], 0.0)
    ent = head_attention_entropy(model, tokens)
    assert ent.shape == (2, 2)
    np.testing.assert_allclose(ent, np.log(s), rtol=1e-12)
    # uniform rows: the mass on a token is its share of the positions 0..i
    obs = HeadObservables(tokens, 0, [2, 3])
    got = obs(model)
    want = _oracle(jax.vmap(model.attention)(tokens[:, :-1]), tokens[:, :-1], 0, [2, 3])
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got["head_entropy"], np.log(s), rtol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("factorised", [True, False])
def test_one_layer_model_matches_a_numpy_computation(factorised):
    """Transformer.from_attention_model(AttentionModel): the attention rows are
    softmax(τ e_i W_E W_A W_Eᵀ e_j) over j ≤ i, computed here in NumPy."""
    small = AttentionModel.init(
        d_vocab=4,
        d_model=3,
        init_scale=0.7,
        key=jax.random.key(2),
        factorised=factorised,
    )
    model = Transformer.from_attention_model(small)
    tokens = np.asarray(_tokens(seed=3, batch=16))
    contexts = tokens[:, :-1]
    W_E, W_A = np.asarray(small.W_E), np.asarray(small.W_A)
    b, s = contexts.shape
    attn = np.zeros((b, 1, 1, s, s))
    for n in range(b):
        emb = W_E[contexts[n]]
        scores = small.tau * emb @ W_A @ emb.T
        for i in range(s):
            w = np.exp(scores[i, : i + 1] - scores[i, : i + 1].max())
            attn[n, 0, 0, i, : i + 1] = w / w.sum()
    want = _oracle(attn, contexts, 0, [3, 2, 1])
    got = HeadObservables(tokens, 0, [3, 2, 1])(model)
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(
        head_attention_entropy(model, tokens), want["head_entropy"], rtol=1e-10
    )


def _hand_model():
    """W_E = W_P = I₃ and W_A = diag(ln 3, ln 2, 0): a query a weighs a key b by
    exp(W_A[a, b]), i.e. 3 for 0 on 0, 2 for 1 on 1, 1 otherwise."""
    eye = jnp.eye(3)
    W_A = jnp.diag(jnp.array([np.log(3.0), np.log(2.0), 0.0]))
    small = AttentionModel(W_E=eye, W_Q=W_A, W_K=None, W_P=eye)
    return Transformer.from_attention_model(small)


HAND_TOKENS = np.array([[0, 1, 0, 2], [1, 1, 0, 0]])


@pytest.mark.slow
def test_attention_on_top_and_self_by_hand():
    """Contexts [0, 1, 0] and [1, 1, 0], top 0, tracked (1, 2).

    Top-token queries: (ctx 1, pos 0) puts 1 on token 0, (ctx 1, pos 2) 6/7 (weights
    3, 1, 3), (ctx 2, pos 2) 3/5 (weights 1, 1, 3): mean 86/105. Token-1 queries:
    (ctx 1, pos 1) 1/3 on token 0 and 2/3 on itself (weights 1, 2), (ctx 2, pos 0
    and 1) 0 and 1: means 1/9 and 8/9. Token 2 never queries: 0, not NaN.
    """
    got = HeadObservables(HAND_TOKENS, 0, [1, 2])(_hand_model())
    np.testing.assert_allclose(got["head_on_top"], [[86 / 105]], rtol=1e-12)
    np.testing.assert_allclose(got["head_tracked_on_top"], [[[1 / 9, 0.0]]], atol=1e-15)
    np.testing.assert_allclose(got["head_self"], [[8 / 9]], rtol=1e-12)
    ent = (_entropy(np.array([3, 1, 3]) / 7) + _entropy(np.array([1, 1, 3]) / 5)) / 2
    np.testing.assert_allclose(got["head_entropy"], [[ent]], rtol=1e-12)
    # a top token that never queries and no tracked occurrence: zeros, no NaN
    none = HeadObservables(HAND_TOKENS, 2, [2])(_hand_model())
    assert float(none["head_on_top"][0, 0]) == 0.0
    assert float(none["head_tracked_on_top"][0, 0, 0]) == 0.0
    assert float(none["head_self"][0, 0]) == 0.0


def test_default_and_from_counts_pick_top_and_tracked():
    # context counts over [0, 5): 6, 1, 3, 2, 0 (the last column is the target)
    tokens = np.array([[0, 0, 0, 1, 4], [0, 0, 2, 2, 4], [2, 3, 3, 0, 4]])
    obs = HeadObservables.default(tokens, 5)
    assert int(obs.top) == 0 and obs.tracked.tolist() == [1, 3, 2]
    assert HeadObservables.default(tokens, 5, n_tracked=2).tracked.tolist() == [1, 3]
    obs = HeadObservables.from_counts(tokens, [1.0, 0.0, 9.0, 2.0, 2.0])
    assert int(obs.top) == 2 and obs.tracked.tolist() == [0, 3, 4]
    with pytest.raises(ValueError, match="no token other"):
        HeadObservables.default(np.zeros((2, 3), int), 3)
    with pytest.raises(ValueError, match=r"tokens must lie in \[0, 3\)"):
        HeadObservables.default(tokens, 3)


@pytest.mark.slow
def test_singular_values_match_numpy_per_head():
    model = _deep(key=4)
    got = HeadObservables(_tokens(), 0, [3])(model)
    k = 2
    assert got["sv_W_A"].shape == got["sv_W_OV"].shape == (2, 2, k)
    for layer, block in enumerate(model.blocks):
        for head in range(2):
            W_Q, W_K = np.asarray(block.W_Q[head]), np.asarray(block.W_K[head])
            W_V, W_O = np.asarray(block.W_V[head]), np.asarray(block.W_O[head])
            np.testing.assert_allclose(
                got["sv_W_A"][layer, head],
                np.linalg.svd(W_Q @ W_K.T, compute_uv=False)[:k],
                rtol=1e-10,
            )
            np.testing.assert_allclose(
                got["sv_W_OV"][layer, head],
                np.linalg.svd(W_V @ W_O, compute_uv=False)[:k],
                rtol=1e-10,
            )
    np.testing.assert_allclose(
        got["sv_W_E"], np.linalg.svd(np.asarray(model.W_E), compute_uv=False)
    )
    np.testing.assert_allclose(
        got["sv_W_P"], np.linalg.svd(np.asarray(model.W_P), compute_uv=False)
    )
    # a rank-deficient head: W_Q W_Kᵀ of rank 1 has one zero singular value
    W = jnp.array([[[1.0, 0.0], [2.0, 0.0], [0.0, 0.0], [2.0, 0.0]]])
    np.testing.assert_allclose(product_singular_values(W, W), [[9.0, 0.0]], atol=1e-12)
    assert "sv_W_OV" not in HeadObservables(_tokens(), 0, [3])(_deep(value=False))


class _NextTokenLoss(eqx.Module):
    """Mean cross-entropy of the token after each context (arrays traced)."""

    tokens: jax.Array

    def __call__(self, model):
        logits = jax.vmap(model)(self.tokens[:, :-1])
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, self.tokens[:, -1:], axis=-1))


@pytest.mark.slow
def test_observables_inside_a_flow_of_a_deep_transformer():
    """2 layers × 2 heads with every option: recorded at every saved time inside the
    compiled flow, equal to the observables of the first and the final model."""
    tokens = _tokens(batch=8, length=7)
    model = _deep()
    obs = HeadObservables.default(tokens, 4)
    tr = gflow.solve_flow(
        _NextTokenLoss(tokens),
        model,
        t1=0.5,
        ts=np.linspace(0, 0.5, 4),
        observables=obs,
        rtol=1e-8,
        atol=1e-10,
    )
    assert tr.ok
    q = obs.tracked.shape[0]
    shapes = {
        "head_entropy": (4, 2, 2),
        "head_on_top": (4, 2, 2),
        "head_tracked_on_top": (4, 2, 2, q),
        "head_self": (4, 2, 2),
        "sv_W_E": (4, 4),
        "sv_W_P": (4, 4),
        "sv_W_A": (4, 2, 2, 2),
        "sv_W_OV": (4, 2, 2, 2),
    }
    for key, shape in shapes.items():
        assert tr.metrics[key].shape == shape, key
        assert np.all(np.isfinite(tr.metrics[key])), key
    first, last = obs(model), obs(tr.final)
    for key in shapes:
        np.testing.assert_allclose(tr.metrics[key][0], first[key], rtol=1e-10)
        np.testing.assert_allclose(tr.metrics[key][-1], last[key], rtol=1e-10)
    assert not np.allclose(
        tr.metrics["head_entropy"][0], tr.metrics["head_entropy"][-1]
    )


@pytest.mark.slow
def test_a_new_sample_does_not_recompile_and_everything_vmaps():
    model = _deep()
    traces = []

    @eqx.filter_jit
    def observe(obs, model):
        traces.append(None)
        return obs(model)

    a = HeadObservables(_tokens(seed=0), 0, [2, 3])
    b = HeadObservables(_tokens(seed=5), 1, [0, 2])
    observe(a, model)
    out_b = observe(b, model)
    assert len(traces) == 1
    np.testing.assert_allclose(out_b["head_self"], b(model)["head_self"], rtol=1e-12)
    # over observables (samples, top and tracked batched) ...
    both = jax.tree.map(lambda x, y: jnp.stack([x, y]), a, b)
    out = jax.vmap(lambda o: o(model))(both)
    for i, o in enumerate((a, b)):
        for key, value in o(model).items():
            np.testing.assert_allclose(out[key][i], value, rtol=1e-10, atol=1e-14)
    # ... and over models
    keys = jnp.stack([jax.random.key(1), jax.random.key(7)])
    models = eqx.filter_vmap(lambda k: _deep_from_key(k))(keys)
    out = eqx.filter_vmap(a)(models)
    for i, k in enumerate((1, 7)):
        np.testing.assert_allclose(
            out["head_tracked_on_top"][i],
            a(_deep(key=k))["head_tracked_on_top"],
            rtol=1e-10,
        )


def _deep_from_key(key):
    return Transformer.init(
        d_vocab=4,
        d_model=4,
        n_layers=2,
        n_heads=2,
        init_scale=0.5,
        key=key,
        **OPTIONS,
    )


# ---------------------------------------------------------------- stages

DT = 0.5
T = np.arange(0.0, 1000.0 + DT / 2, DT)
LN19 = np.log(19.0)


def _sig(t, centre, width):
    return 1.0 / (1.0 + np.exp(-(t - centre) / width))


def _lift(t, onset, rate=0.05, eps=1e-3):
    """σ(t) = ε e^{rx}/(1 + ε e^{rx}), x = max(t - onset, 0); its growth edges."""
    g = eps * np.exp(rate * np.clip(t - onset, 0, None))
    start = onset + np.log(2 / (1 - eps)) / rate  # ln σ up by ln 2 from its floor
    end = onset + np.log((3 + 4 * eps) / eps) / rate  # d ln σ/dt down to 1/4 peak
    return g / (1 + g), (start, end)


def _head_trajectory(t=T):
    """Two layers × two heads. Head (0, 1) runs the paper's two cycles: its excess on
    the top token rises at 80 as its entropy falls (focus onto ``top``), the tracked
    queries' excess on top falls at 150 (dilution), σ₂(W_E) lifts from 250 (and σ₂
    of the head's own W_A with it), then its tracked queries rise onto themselves
    (700) and the top query's excess on itself falls (750). Head (1, 0)'s entropy
    falls at 300 as its mass moves onto the first position (an attention sink: a
    named move, never the paper's focus). Head (1, 1) wiggles below the detector's
    amplitudes; head (0, 0) is flat. The loss condenses (0.5 e^{-t/5}) and falls
    again by 0.15 with head (0, 1)'s focus.
    """
    n = t.size
    log6 = np.log(6.0)
    loss = 0.8 + 0.5 * np.exp(-t / 5.0) - 0.15 * _sig(t, 80.0, 4.0)
    ent = np.full((n, 2, 2), log6)
    ent[:, 0, 1] -= 1.2 * _sig(t, 80.0, 4.0)
    ent[:, 1, 0] -= 0.8 * _sig(t, 300.0, 6.0)
    ent[:, 1, 1] += 0.04 * np.sin(t / 20.0)
    every = np.zeros((n, 2, 2, 5))  # excess per key class, every query row
    every[:, 0, 1, 0] = 0.3 * _sig(t, 80.0, 4.0)
    every[:, 1, 0, 3] = 0.6 * _sig(t, 300.0, 6.0)
    every[:, 1, 1, :] = 0.02 * np.sin(t / 20.0)[:, None]
    tracked = np.zeros((n, 2, 2, 5))  # ... the tracked queries' rows
    tracked[:, 0, 1, 0] = 0.1 - 0.4 * _sig(t, 150.0, 5.0)
    tracked[:, 0, 1, 1] = 0.5 * _sig(t, 700.0, 8.0)
    top_query = np.full((n, 2, 2), 0.2)  # ... the top query's on the top token
    top_query[:, 0, 1] -= 0.5 * _sig(t, 750.0, 8.0)
    sv = np.ones((n, 2, 2, 2))
    sv[..., 1] = 1e-3
    sv2, lift = _lift(t, 250.0)
    sv[:, 0, 1, 1] = sv2
    sv_E = np.stack([np.ones(n), sv2, np.full(n, 1e-3)], axis=1)
    metrics = {
        "loss": loss,
        "head_entropy": ent,
        "head_key_excess": every,
        "head_tracked_key_excess": tracked,
        "head_top_query_excess": top_query,
        "sv_W_A": sv,
        "sv_W_E": sv_E,
    }
    edges = {
        ("focus", 1, 0, 1): (80.0 - 4.0 * LN19, 80.0 + 4.0 * LN19),
        ("entropy_fall", 1, 0, 1): (80.0 - 4.0 * LN19, 80.0 + 4.0 * LN19),
        ("dilution", 1, 0, 1): (150.0 - 5.0 * LN19, 150.0 + 5.0 * LN19),
        ("asymmetry_lifting", 1, -1, -1): lift,
        ("head_lifting", 1, 0, 1): lift,
        ("entropy_fall", 1, 1, 0): (300.0 - 6.0 * LN19, 300.0 + 6.0 * LN19),
        ("first_position_focus", 1, 1, 0): (300.0 - 6.0 * LN19, 300.0 + 6.0 * LN19),
        ("focus", 2, 0, 1): (700.0 - 8.0 * LN19, 700.0 + 8.0 * LN19),
        ("dilution", 2, 0, 1): (750.0 - 8.0 * LN19, 750.0 + 8.0 * LN19),
    }
    return Trajectory(t=t, metrics=metrics, final=None), edges


def test_each_head_gets_its_own_stages_at_the_constructed_times():
    traj, edges = _head_trajectory()
    stages = detect_head_stages(traj)
    cond, rest = stages[0], stages[1:]
    assert (cond.name, cond.layer, cond.head, cond.t_start) == (
        "condensation",
        -1,
        -1,
        0.0,
    )
    # the first plateau: the loss rate is down to 5% of its peak near 5 ln 20 = 15,
    # long before head (0, 1)'s focus takes the loss lower still
    assert 14.0 <= cond.t_end <= 16.5
    assert sorted((s.name, s.cycle, s.layer, s.head) for s in rest) == sorted(edges)
    for s in rest:
        start, end = edges[(s.name, s.cycle, s.layer, s.head)]
        # the first grid point at which the signal has covered the edge fraction
        assert start <= s.t_start + 1e-9 < start + DT + 1e-9, (s, start)
        assert end <= s.t_end + 1e-9 < end + DT + 1e-9, (s, end)
    assert [s.t_start for s in stages] == sorted(s.t_start for s in stages)
    # each attention move names the key class its mass moved onto
    keys = {(s.name, s.cycle, s.layer, s.head): s.key for s in rest}
    assert keys[("focus", 1, 0, 1)] == keys[("dilution", 1, 0, 1)] == "top"
    assert keys[("entropy_fall", 1, 0, 1)] == "top"
    assert keys[("focus", 2, 0, 1)] == "self"
    # the head whose mass moved onto the first position: no paper stage at all
    sink = [s for s in rest if (s.layer, s.head) == (1, 0)]
    assert {(s.name, s.key) for s in sink} == {
        ("entropy_fall", "first"),
        ("first_position_focus", "first"),
    }
    assert not any(s.is_paper_stage for s in sink)


def test_no_frequent_token_silences_the_paper_stages_and_says_so():
    """On a sample whose top token is not clearly the most frequent (uniform π),
    the cycle-1 focus onto it is not defined: no paper stage of a head, a warning;
    the other named moves remain."""
    traj, _ = _head_trajectory()
    m = dict(traj.metrics, top_dominance=np.full(T.size, 1.05))
    with pytest.warns(UserWarning, match="no most frequent token"):
        stages = detect_head_stages(Trajectory(t=T, metrics=m, final=None))
    paper = {s.name for s in stages if s.is_paper_stage}
    assert paper == {"condensation"}
    assert ("entropy_fall", 0, 1) in {(s.name, s.layer, s.head) for s in stages}
    m["top_dominance"] = np.full(T.size, 3.0)  # the paper's chain: about 4
    assert detect_head_stages(Trajectory(t=T, metrics=m, final=None)) == (
        detect_head_stages(traj)
    )


def test_a_focus_and_a_growing_sigma_two_in_one_head_only():
    """Only head (0, 1) moves: its excess on the top token rises (logistic at 60,
    width 3) as its entropy falls, and only its σ₂(W_A) grows: the paper's focus,
    the entropy fall it names and the head's own lifting; no global lifting
    (σ(W_E) flat), no dilution (the tracked queries do not move)."""
    t = np.arange(0.0, 500.0 + DT / 2, DT)
    traj, _ = _head_trajectory(t)
    m = dict(traj.metrics)
    m["head_entropy"] = np.full((t.size, 2, 2), 1.5)
    m["head_entropy"][:, 0, 1] -= 1.0 * _sig(t, 60.0, 3.0)
    m["head_key_excess"] = np.zeros((t.size, 2, 2, 5))
    m["head_key_excess"][:, 0, 1, 0] = 0.5 * _sig(t, 60.0, 3.0)
    m["head_tracked_key_excess"] = np.zeros((t.size, 2, 2, 5))
    m["head_top_query_excess"] = np.zeros((t.size, 2, 2))
    m["sv_W_E"] = np.ones((t.size, 3))
    m["loss"] = np.full(t.size, 1.0)  # no condensation: windows open at t0
    stages = detect_head_stages(Trajectory(t=t, metrics=m, final=None))
    _, lift = _lift(t, 250.0)
    assert [(s.name, s.cycle, s.layer, s.head, s.key) for s in stages] == [
        ("focus", 1, 0, 1, "top"),
        ("entropy_fall", 1, 0, 1, "top"),
        ("head_lifting", 1, 0, 1, None),
    ]
    for s in stages[:2]:
        assert 60.0 - 3.0 * LN19 <= s.t_start < 60.0 - 3.0 * LN19 + DT
        assert 60.0 + 3.0 * LN19 <= s.t_end < 60.0 + 3.0 * LN19 + DT
    lifting = stages[2]
    assert lift[0] <= lifting.t_start < lift[0] + DT
    assert lift[1] <= lifting.t_end < lift[1] + DT


def test_condensation_from_the_unigram_gap_and_the_detector_thresholds():
    traj, _ = _head_trajectory()
    m = dict(traj.metrics, unigram_gap=0.5 * np.exp(-T / 5.0))
    stages = detect_head_stages(Trajectory(t=T, metrics=m, final=None))
    # gap ≤ 5% of its initial value from t = 5 ln 20 = 14.98 on
    assert stages[0].to_dict() == {
        "stage": "condensation",
        "t_start": 0.0,
        "t_end": 15.0,
        "cycle": 1,
        "layer": -1,
        "head": -1,
    }
    # stricter thresholds drop head (1, 0)'s 0.8-nat entropy fall and its 0.6 move
    # onto the first position, and head (0, 1)'s 0.3 focus, not its 1.2-nat fall
    strict = detect_head_stages(
        traj, detector=StageDetector(min_amplitude=1.0, margin=0.7)
    )
    assert (1, 0) not in {(s.layer, s.head) for s in strict}
    named = {(s.name, s.layer, s.head) for s in strict}
    assert ("entropy_fall", 0, 1) in named and ("focus", 0, 1) not in named


def test_missing_metrics_and_bad_head_stages_are_refused():
    traj, _ = _head_trajectory()
    m = {k: v for k, v in traj.metrics.items() if k != "sv_W_A"}
    with pytest.raises(ValueError, match="sv_W_A"):
        detect_head_stages(Trajectory(t=T, metrics=m, final=None))
    excess = traj.metrics["head_key_excess"]
    m = dict(traj.metrics, head_key_excess=excess[:, :1])
    with pytest.raises(ValueError, match="head_key_excess"):
        detect_head_stages(Trajectory(t=T, metrics=m, final=None))
    m = dict(traj.metrics, head_key_excess=excess[..., :3])  # not the 5 classes
    with pytest.raises(ValueError, match="key classes"):
        detect_head_stages(Trajectory(t=T, metrics=m, final=None))
    with pytest.raises(ValueError, match="key must be"):
        HeadStage("focus", 0.0, 1.0, 1, 0, 0, key="sideways")
    with pytest.raises(ValueError, match="stage name"):
        HeadStage("plateau", 0.0, 1.0, 1, 0, 0)
    with pytest.raises(ValueError, match="t_end"):
        HeadStage("focus", 2.0, 1.0, 1, 0, 0)
    with pytest.raises(ValueError, match="both -1"):
        HeadStage("focus", 0.0, 1.0, 1, -1, 0)
    s = HeadStage("dilution", 1.0, 2.0, 2, 1, 0)
    assert s.stage == "dilution"
    assert s.to_dict() == {
        "stage": "dilution",
        "t_start": 1.0,
        "t_end": 2.0,
        "cycle": 2,
        "layer": 1,
        "head": 0,
    }


#: stages.json of ``_head_trajectory()``: layer and head last, -1 for the global
#: condensation and lifting; ``"provisional": true`` on every head's stage, since no
#: signal of these runs turns back after its move (each ends at the run's running
#: extremum); ``"key"``, the key class, on every attention move.
HEAD_STAGES_JSON = (
    '[{"stage": "condensation", "t_start": 0.0, "t_end": 15.5, "cycle": 1, '
    '"layer": -1, "head": -1}, '
    '{"stage": "focus", "t_start": 68.5, "t_end": 92.0, "cycle": 1, "layer": 0, '
    '"head": 1, "provisional": true, "key": "top"}, '
    '{"stage": "entropy_fall", "t_start": 68.5, "t_end": 92.0, "cycle": 1, '
    '"layer": 0, "head": 1, "provisional": true, "key": "top"}, '
    '{"stage": "dilution", "t_start": 135.5, "t_end": 165.0, "cycle": 1, '
    '"layer": 0, "head": 1, "provisional": true, "key": "top"}, '
    '{"stage": "asymmetry_lifting", "t_start": 264.0, "t_end": 410.5, "cycle": 1, '
    '"layer": -1, "head": -1, "provisional": true}, '
    '{"stage": "head_lifting", "t_start": 264.0, "t_end": 410.5, "cycle": 1, '
    '"layer": 0, "head": 1, "provisional": true}, '
    '{"stage": "entropy_fall", "t_start": 282.5, "t_end": 318.0, "cycle": 1, '
    '"layer": 1, "head": 0, "provisional": true, "key": "first"}, '
    '{"stage": "first_position_focus", "t_start": 282.5, "t_end": 318.0, '
    '"cycle": 1, "layer": 1, "head": 0, "provisional": true, "key": "first"}, '
    '{"stage": "focus", "t_start": 676.5, "t_end": 724.0, "cycle": 2, "layer": 0, '
    '"head": 1, "provisional": true, "key": "self"}, '
    '{"stage": "dilution", "t_start": 726.5, "t_end": 774.0, "cycle": 2, '
    '"layer": 0, "head": 1, "provisional": true, "key": "top"}]'
)


def test_head_stages_are_stages_with_the_old_json():
    assert HeadStage is gflow.Stage  # the old name, kept for old imports
    stages = detect_head_stages(_head_trajectory()[0])
    assert all(type(s) is gflow.Stage and not s.is_event for s in stages)
    assert json.dumps([s.to_dict() for s in stages]) == HEAD_STAGES_JSON
    assert [gflow.Stage.from_dict(d) for d in json.loads(HEAD_STAGES_JSON)] == stages
    assert [gflow.Stage.from_dict(s.to_dict()) for s in stages] == stages


# ---------------------------------------------------------------- figures


@pytest.mark.slow
def test_figures_are_written_as_png(tmp_path):
    traj, _ = _head_trajectory()
    path = tmp_path / "heads.png"
    plot_head_entropy(traj, path, stages=detect_head_stages(traj), title="heads")
    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    plot_head_entropy(traj, tmp_path / "plain.png")
    assert imread(tmp_path / "plain.png").size > 0
    path = tmp_path / "maps.png"
    plot_attention_maps(_deep(), _tokens()[1, :-1], path, title="maps")
    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_the_global_lifting_is_sigma_two_of_the_embedding():
    """The paper's lifting is σ₂(W_E)'s growth, global (layer = head = -1), at its
    closed-form edges and after the first head's paper focus; each head's own
    σ₂(W_A,h) growth is the named move ``head_lifting``. A σ₃(W_E) that doubles
    after t = 700 closes it; the head's stays open. The paper's cycle 2 of a head
    opens when σ₂(W_E)'s growth ends."""
    traj, edges = _head_trajectory()
    sv2, lift = _lift(T, 120.0, rate=0.08)
    sv3 = 1e-3 * np.exp(0.02 * np.clip(T - 700.0, 0, None))
    sv_E = np.stack([np.ones_like(T), sv2, sv3], axis=1)
    # head (0, 1)'s excess on top turns back late (t = 900), which closes its
    # focus, the first focus; without that the lifting after it could not close
    excess = traj.metrics["head_key_excess"].copy()
    excess[:, 0, 1, 0] -= 0.2 * _sig(T, 900.0, 5.0)
    m = dict(traj.metrics, head_key_excess=excess, sv_W_E=sv_E)
    stages = detect_head_stages(Trajectory(t=T, metrics=m, final=None))
    globs = [s for s in stages if s.name == "asymmetry_lifting"]
    assert all(g.layer == g.head == -1 for g in globs)
    # σ₃(W_E)'s growth is cycle 2's lifting, open: no σ₄ to close it
    assert [(g.cycle, g.provisional) for g in globs] == [(1, False), (2, True)]
    glob = globs[0]
    assert lift[0] <= glob.t_start < lift[0] + DT
    assert lift[1] <= glob.t_end < lift[1] + DT
    (own,) = [s for s in stages if s.name == "head_lifting"]
    start, end = edges[("head_lifting", 1, 0, 1)]
    assert (own.layer, own.head, own.provisional) == (0, 1, True)
    assert start <= own.t_start < start + DT and end <= own.t_end < end + DT
    two = [s for s in stages if s.cycle == 2 and s.layer == 0]
    assert [(s.name, s.key) for s in two] == [("focus", "self"), ("dilution", "top")]
    assert all(s.t_start > glob.t_end for s in two)


def test_the_paper_focus_needs_information_and_a_level_above_the_baseline():
    """The null the gate is for: a run whose loss never falls below the unigram loss
    (i.i.d. tokens: no attention move carries information) has no paper stage,
    while its other named moves remain; and a rise of the excess from below the
    uniform baseline back to it (a recovery, amplitude 0.3) is no focus."""
    traj, _ = _head_trajectory()
    flat = dict(traj.metrics, unigram_gap=np.full(T.size, 0.01))
    stages = detect_head_stages(Trajectory(t=T, metrics=flat, final=None))
    assert not any(s.is_paper_stage for s in stages)
    assert ("first_position_focus", 1, 0) in {(s.name, s.layer, s.head) for s in stages}
    # the same run informed (the gap falls 0.05 below zero at t = 100): the focus
    informed = dict(flat, unigram_gap=0.01 - 0.06 * _sig(T, 100.0, 5.0))
    stages = detect_head_stages(Trajectory(t=T, metrics=informed, final=None))
    assert ("focus", 0, 1) in {(s.name, s.layer, s.head) for s in stages}
    # a recovery from -0.3 to 0: not above the baseline by the margin
    excess = traj.metrics["head_key_excess"].copy()
    excess[:, 0, 1, 0] = -0.3 + 0.3 * _sig(T, 80.0, 4.0)
    m = dict(traj.metrics, head_key_excess=excess)
    stages = detect_head_stages(Trajectory(t=T, metrics=m, final=None))
    assert not any(s.is_paper_stage and s.layer >= 0 for s in stages)
    assert StageDetector().rises_above(T, excess[:, 0, 1, 0]) == []
    assert len(StageDetector(margin=0.1).rises_above(T, 0.3 * _sig(T, 80.0, 4.0))) == 1
