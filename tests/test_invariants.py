"""Invariants of the science that a one-line bug breaks, in the default run (issue 58).

Causality: no position of any model reads a later token (its logits, attention rows
and loss stay when a later token changes; each position is the model on its
prefix). The clock: the gradient flow is autonomous, so a solve from (t0, y) to t1
is the solve from (0, y) to t1 − t0, at exactly the saved times asked for; an
optimizer run's clock is the running sum of the step sizes it took. Blocks: a
distance between runs moves only in the block that differs.

Tiny models (width 8, 2 heads, context 5) in float64; each model's programs are
compiled once, by a module-scoped fixture, and read by several tests.
"""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gflow
from gflow import AttentionModel, PositionalAttentionModel, Trajectory, Transformer
from gflow.analysis import attention_rows
from gflow.dynamics.solvers import RKC2
from gflow.text import TextLoss, text_loss

D_VOCAB, WIDTH, HEADS, S = 4, 8, 2, 5
# a context of S tokens and its window (the S targets after it)
WINDOW = jnp.array([2, 0, 3, 1, 2, 3])
CONTEXT = WINDOW[:-1]

# ---------------------------------------------------------------- causality


def _transformer(**opts):
    kw = dict(d_vocab=D_VOCAB, d_model=WIDTH, n_heads=HEADS, init_scale=0.6)
    return Transformer.init(key=jax.random.key(3), **{**kw, **opts})


#: every option of Transformer.init on and off (one layer: the MLP and LayerNorm
#: without value matrices, residual stream or positions, then the other way round),
#: and all of them over two layers (a second layer reads the first one's every
#: position)
MODELS = {
    "transformer-mlp-layernorm": lambda: _transformer(d_ff=16, layernorm=True),
    "transformer-value-residual-positions": lambda: _transformer(
        value=True, residual=True, max_len=S
    ),
    "transformer-all-2-layers": lambda: _transformer(
        n_layers=2,
        d_ff=16,
        value=True,
        layernorm=True,
        residual=True,
        max_len=S,
        tau="inv_sqrt_m",
    ),
    "attention": lambda: AttentionModel.init(
        d_vocab=D_VOCAB, d_model=WIDTH, init_scale=0.6, key=jax.random.key(4)
    ),
    "attention-unfactorised-residual": lambda: AttentionModel.init(
        d_vocab=D_VOCAB,
        d_model=WIDTH,
        init_scale=0.6,
        factorised=False,
        residual=True,
        key=jax.random.key(5),
    ),
    "positional": lambda: PositionalAttentionModel.init(
        context_length=S,
        d_vocab=D_VOCAB,
        d_model=WIDTH,
        init_scale=0.6,
        key=jax.random.key(6),
    ),
    "positional-residual": lambda: PositionalAttentionModel.init(
        context_length=S,
        d_vocab=D_VOCAB,
        d_model=WIDTH,
        init_scale=0.6,
        residual=True,
        key=jax.random.key(7),
    ),
}


def _changed(window):
    """[S + 2, S + 1]: the window, then the window with token j changed, j = 0..S."""
    rows = [window] + [
        window.at[j].set((window[j] + 1) % D_VOCAB) for j in range(S + 1)
    ]
    return jnp.stack(rows)


def _ce(logits, targets):
    """The cross-entropy of each row of logits [..., d] at its target [...]."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]


def _causal_losses(model, windows):
    """Every loss of the library that predicts all positions, on windows [n, S + 1]."""
    losses = {"text_loss": text_loss(model, windows, all_positions=True)}
    if not isinstance(model, Transformer):  # a Transformer's is text_loss's
        losses["TextLoss"] = TextLoss(windows, d_vocab=D_VOCAB, all_positions=True)(
            model
        )
    if isinstance(model, Transformer):
        losses["sequence_loss"] = gflow.sequence_loss(
            model, windows, all_positions=True
        )
    if isinstance(model, AttentionModel):  # its d×d and gathered forms
        for dense in (True, False):
            losses[f"sequence_loss dense={dense}"] = gflow.sequence_loss(
                model, windows, all_positions=True, dense=dense
            )
    return losses


def _last_token_loss(model, windows):
    """The library's last-position loss on windows [n, k + 1]."""
    if isinstance(model, AttentionModel):
        return gflow.sequence_loss(model, windows)
    return text_loss(model, windows)


@eqx.filter_jit
def _outputs(model, windows):
    """What the causality tests read of each window [n, S + 1], in one program."""
    contexts = windows[:, :-1]
    logits = jax.vmap(model.causal_logits)(contexts)  # [n, S, d]
    return {
        "logits": logits,
        "rows": jax.vmap(lambda c: attention_rows(model, c))(contexts),
        "per_position": _ce(logits, windows[:, 1:]),  # [n, S]
        "last": jax.vmap(model)(contexts),  # [n, d]
        "causal_losses": jax.vmap(lambda w: _causal_losses(model, w[None]))(windows),
    }


@eqx.filter_jit
def _prefixes(model):
    """Each position on its own: the model on CONTEXT cut after position q, and the
    last-token loss of WINDOW cut after target q + 1, q = 0..S-1."""
    return {
        "logits": jnp.stack([model(CONTEXT[: q + 1]) for q in range(S)]),
        # causal rows: the last row of each prefix (a model that gives the last
        # row only has nothing more to compare)
        "rows": [
            attention_rows(model, CONTEXT[: q + 1])
            for q in range(S)
            if not isinstance(model, PositionalAttentionModel)
        ],
        "losses": jnp.stack(
            [_last_token_loss(model, WINDOW[None, : q + 2]) for q in range(S)]
        ),
    }


@pytest.fixture(scope="module", params=list(MODELS))
def outputs(request):
    model = MODELS[request.param]()
    return jax.tree.map(np.asarray, _outputs(model, _changed(WINDOW)))


#: the prefix programs compile a model per context length: the one-layer models,
#: whose causal rows are computed apart from their last-position output, and a
#: Transformer with positions (one layer: the prefixes of two cost 2 s more)
PREFIX_MODELS = [
    "transformer-value-residual-positions",
    *(name for name in MODELS if not name.startswith("transformer")),
]


@pytest.fixture(scope="module", params=PREFIX_MODELS)
def prefixes(request):
    model = MODELS[request.param]()
    full = _outputs(model, _changed(WINDOW))
    return jax.tree.map(np.asarray, (full, _prefixes(model)))


def test_changing_a_later_token_leaves_every_earlier_position(outputs):
    """Token j changed: the logits, attention rows and per-position losses of the
    positions before j are the same numbers; position j's logits move."""
    logits, rows, loss = outputs["logits"], outputs["rows"], outputs["per_position"]
    r = rows.shape[-2]  # S causal rows, or 1 (the last position's only)
    for j in range(S):  # a context token
        changed = 1 + j
        np.testing.assert_allclose(
            logits[changed, :j], logits[0, :j], rtol=1e-13, atol=1e-15
        )
        assert np.abs(logits[changed, j] - logits[0, j]).max() > 1e-3
        # position i's loss reads tokens 0..i and its target i + 1
        np.testing.assert_allclose(
            loss[changed, : max(j - 1, 0)],
            loss[0, : max(j - 1, 0)],
            rtol=1e-13,
            atol=1e-15,
        )
        # attention rows of the queries before j (row q sits at q - (S - r))
        before = max(j - (S - r), 0)
        np.testing.assert_allclose(
            rows[changed, ..., :before, :],
            rows[0, ..., :before, :],
            rtol=1e-13,
            atol=1e-15,
        )
    # the last target changed: every logit and row stays, the last loss moves
    np.testing.assert_array_equal(logits[S + 1], logits[0])
    np.testing.assert_array_equal(rows[S + 1], rows[0])
    np.testing.assert_allclose(loss[S + 1, :-1], loss[0, :-1], rtol=1e-13)
    assert abs(loss[S + 1, -1] - loss[0, -1]) > 1e-3


def test_attention_rows_put_no_weight_on_later_keys(outputs):
    """Every row is a distribution over the keys up to its query, exactly 0 after."""
    rows = outputs["rows"]
    r = rows.shape[-2]
    np.testing.assert_allclose(rows.sum(-1), 1.0, rtol=1e-13)
    queries = np.arange(S - r, S)[:, None]
    later = np.arange(S)[None, :] > queries  # [r, S]
    assert np.all(rows[..., later] == 0.0)
    assert np.all(rows[..., ~later] > 0.0)


def test_each_position_is_the_model_on_its_prefix(prefixes):
    """Row q of the causal logits (and of the attention) is the model on the context
    cut after position q."""
    full, cut = prefixes
    np.testing.assert_allclose(full["logits"][0], cut["logits"], rtol=1e-12, atol=1e-14)
    for q, rows in enumerate(cut["rows"]):  # causal rows: row q, keys 0..q
        np.testing.assert_allclose(
            full["rows"][0, ..., q, : q + 1],
            rows[..., -1, :],
            rtol=1e-12,
            atol=1e-15,
        )


def test_every_causal_loss_is_the_mean_of_its_prefix_losses(prefixes):
    """The all-positions loss of every loss function is the mean over q of the
    last-token loss on the window cut after target q + 1: position q's loss reads
    no later token."""
    full, cut = prefixes
    for name, loss in full["causal_losses"].items():
        np.testing.assert_allclose(
            loss[0], cut["losses"].mean(), rtol=1e-12, err_msg=name
        )


def test_every_causal_loss_is_the_mean_of_the_per_position_losses(outputs):
    """The library's all-positions losses are the mean cross-entropy of the causal
    logits at each position, for the window and each of its changed copies; the
    last position's logits are ``model(context)``."""
    for name, loss in outputs["causal_losses"].items():
        np.testing.assert_allclose(
            loss, outputs["per_position"].mean(-1), rtol=1e-12, err_msg=name
        )
    np.testing.assert_allclose(outputs["last"], outputs["logits"][:, -1], rtol=1e-12)


# ---------------------------------------------------------------- the clock


class Quadratic(eqx.Module):
    """L(w) = ½ Σ_i a_i w_i²: the flow is w(t) = w(t0) e^{−a (t − t0)}, and gradient
    descent with steps η_k is w_k = w_0 Π_{i<k} (1 − η_i a)."""

    a: jax.Array

    def __call__(self, model):
        return 0.5 * jnp.sum(self.a * model["w"] ** 2)


A = jnp.array([0.5, 1.0, 1.5])
W0 = {"w": jnp.array([1.0, -2.0, 0.5])}


def _flow(t0, t1, ts=None):
    # Tsit5 alone: the clock is solve_flow's, whichever solver it drives (the
    # default AutoSwitch compiles for twice as long). One budget of 100 steps for
    # every solve here: max_steps is static, t0, t1, ts and the tolerances are
    # traced, so the four solves of `flows` are one compiled program (201 saves
    # each, the default's number)
    return gflow.solve_flow(
        Quadratic(A),
        W0,
        t0=t0,
        t1=t1,
        ts=ts,
        solver=diffrax.Tsit5(),
        rtol=1e-10,
        atol=1e-12,
        max_steps=100,
        save_params=True,
    )


@pytest.fixture(scope="module")
def flows():
    """The flow from (t0 = 0.7, W0) and from (0, W0) over the same 1.3 of time, saved
    at the same uneven offsets; the flow from 0.7 to 2 at the default saves; and the
    flow from 0.7 to 1000.7, which 100 steps cannot reach (these tolerances take 42
    steps for 1.3 of time; its 100 steps end near t = 4)."""
    offsets = 1.3 * np.linspace(0.0, 1.0, 201) ** 2
    return (
        offsets,
        _flow(0.7, 2.0, 0.7 + offsets),
        _flow(0.0, 1.3, offsets),
        {"default": _flow(0.7, 2.0), "short": _flow(0.7, 1000.7)},
    )


def test_the_flow_from_t0_is_the_closed_form_at_the_times_asked(flows):
    """Started at t0 = 0.7, the flow is w0 e^{−a (t − 0.7)}, recorded at exactly the
    times asked for."""
    offsets, late, _, _ = flows
    ts = 0.7 + offsets
    assert late.ok and late.info["t0"] == 0.7
    np.testing.assert_array_equal(late.t, ts)  # exactly the times asked for
    want = np.asarray(W0["w"]) * np.exp(-np.outer(offsets, A))  # e^{−a (t − t0)}
    np.testing.assert_allclose(late.params["w"], want, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(
        late.metrics["loss"], 0.5 * (want**2) @ np.asarray(A), rtol=1e-9
    )
    np.testing.assert_allclose(late.final["w"], want[-1], rtol=1e-9)


def test_the_flow_is_autonomous(flows):
    """From (t0, y) to t1 is from (0, y) to t1 − t0: only the elapsed time counts."""
    offsets, late, early, _ = flows
    np.testing.assert_array_equal(early.t, offsets)
    np.testing.assert_allclose(late.params["w"], early.params["w"], rtol=1e-9)
    for name in ("loss", "grad_norm"):
        np.testing.assert_allclose(
            late.metrics[name], early.metrics[name], rtol=1e-9, err_msg=name
        )


def test_default_saves_start_at_t0_and_a_short_budget_says_max_steps(flows):
    """Without ``ts`` the saves are evenly spaced from t0 (not from 0) to t1; a
    solve stopped by ``max_steps`` reports ``max_steps`` (not ``failed``).

    Catches the default save times computed from 0, and the status names of the
    result codes swapped."""
    default, short = flows[3]["default"], flows[3]["short"]
    assert default.ok and default.t[0] == 0.7 and default.t[-1] == 2.0
    np.testing.assert_allclose(np.diff(default.t), np.diff(default.t)[0], rtol=1e-12)
    assert short.status == "max_steps" and not short.ok


def test_a_run_that_blows_up_at_its_first_step_stops_there():
    """One step of η = 1e9 on L = ½ Σ a w² throws |w| past the blow-up bound 1e8:
    the run diverged at step 0, its clock stops there (t = 0 at every later save),
    every save after the first is NaN, and its 400 steps make the default
    ⌊400/200⌋ = 2 steps between saves (201 saves). The gradient evaluations it
    reports are those the loss counted: one a step and two a save (the loss and
    its gradient's norm).

    Catches the blow-up read on the parameters before the step (step 1, a step
    late), saves after a divergence at step 0 left finite (> for >=), the default
    spacing from ⌊steps/201⌋, and each save's gradient counted once."""
    calls = []

    class Counted(Quadratic):
        def __call__(self, model):
            jax.debug.callback(lambda: calls.append(1))
            return super().__call__(model)

    run = gflow.run_optimizer(
        Counted(A), W0, optax.sgd(1e9), steps=400, learning_rate=1e9
    )
    jax.effects_barrier()
    assert run.status == "diverged" and run.stats["diverged_step"] == 0
    assert run.stats["save_every"] == 2 and len(run.t) == 201
    np.testing.assert_array_equal(run.t, 0.0)
    assert np.isfinite(run.metrics["loss"][0])
    assert np.all(np.isnan(run.metrics["loss"][1:]))
    assert run.stats["grad_evals"] == len(calls) == 400 + 2 * 201


def test_rejected_steps_are_charged_the_accepted_steps_mean():
    """RKC2 on L = ½ Σ a w² (h ρ < 1.6: two stages a step) counts its accepted
    steps' evaluations: 1 + 2·30 to start (f and 30 power-iteration products),
    then 4 a step (one product for ρ, one stage, f at the end). The rejected steps,
    whose state Diffrax drops, are charged the accepted steps' mean, so the solve
    reports A + round(R·A/N_acc) with A = 61 + 4 N_acc (129 here, with 3 of 12
    steps rejected).

    Catches the rejected steps charged the mean over all steps (121 here)."""
    traj = gflow.solve_flow(
        Quadratic(A),
        W0,
        t1=1.0,
        ts=np.array([0.0, 1.0]),
        solver=RKC2(),
        rtol=1e-3,
        atol=1e-6,
        dt0=1.0,
        progress=False,
    )
    s = traj.stats
    accepted, rejected = s["num_accepted_steps"], s["num_rejected_steps"]
    assert rejected > 0
    kept = 61 + 4 * accepted
    assert s["grad_evals"] == kept + round(rejected * kept / accepted)


SCHEDULE = optax.warmup_cosine_decay_schedule(
    0.05, 0.4, warmup_steps=3, decay_steps=10, end_value=0.05
)


@pytest.mark.parametrize("given", ["injected", "learning_rate"])
def test_the_optimizer_clock_is_the_running_sum_of_its_steps(given):
    """t_k = Σ_{i<k} η_i at every step, and the parameters there are gradient
    descent's with exactly those steps: the clock is the steps taken, read from
    the optimizer's state or given as ``learning_rate=``."""
    steps = 12
    # optax evaluates a schedule on its int32 step count, in float32: the steps
    # taken are those numbers
    eta = np.array([SCHEDULE(jnp.asarray(k, jnp.int32)) for k in range(steps)], float)
    if given == "injected":
        opt, kw = optax.inject_hyperparams(optax.sgd)(learning_rate=SCHEDULE), {}
    else:
        opt, kw = optax.sgd(SCHEDULE), {"learning_rate": SCHEDULE}
    assert len(set(eta)) > steps // 2  # the schedule moves
    tr = gflow.run_optimizer(
        Quadratic(A), W0, opt, steps=steps, save_every=1, save_params=True, **kw
    )
    t = np.concatenate([[0.0], np.cumsum(eta)])
    np.testing.assert_allclose(tr.t, t, rtol=1e-14, atol=0)
    w = np.asarray(W0["w"]) * np.cumprod(1 - np.outer(eta, A), axis=0)
    np.testing.assert_allclose(tr.params["w"][1:], w, rtol=1e-12)
    # saved every 5 steps: the same clock at steps 0, 5, 10 and the last, 12
    sparse = gflow.run_optimizer(Quadratic(A), W0, opt, steps=steps, save_every=5, **kw)
    np.testing.assert_allclose(sparse.t, t[[0, 5, 10, 12]], rtol=1e-14, atol=0)


# ---------------------------------------------------------------- blocks


def _stacked(model, n):
    # numpy leaves, as a solve's saves are (and no op-by-op compile per shape)
    return jax.tree.map(lambda x: np.stack([np.asarray(x)] * n), model)


def _run(snaps, n):
    return Trajectory(
        t=np.arange(n) * 0.5, metrics={"loss": np.zeros(n)}, final=None, params=snaps
    )


def test_moving_one_block_moves_only_its_distance():
    """The attention model's blocks W_E, W_P, W_A = W_Q W_Kᵀ: a change of one of
    them is seen in its own entry only, by the norm of the change (W_Q moved by δ
    moves W_A by δ W_Kᵀ), at its own time; ``compare`` reads the same.

    Time 0 is the reference itself; at time i one of W_E, W_P, W_Q, W_K moves."""
    model = MODELS["attention"]()
    names = ("W_E", "W_P", "W_Q", "W_K")
    n = 1 + len(names)
    ref = _run(_stacked(model, n), n)
    snaps = ref.params
    want = {block: np.zeros(n) for block in ("total", "W_E", "W_P", "W_A")}
    W_Q, W_K = np.asarray(model.W_Q), np.asarray(model.W_K)
    for i, name in enumerate(names, start=1):
        old = getattr(model, name)
        delta = 1e-3 * np.random.default_rng(i).normal(size=old.shape)
        moved_block = getattr(snaps, name).copy()
        moved_block[i] += delta
        snaps = eqx.tree_at(lambda m, name=name: getattr(m, name), snaps, moved_block)
        want["total"][i] = np.linalg.norm(delta)
        if name in ("W_E", "W_P"):
            want[name][i] = np.linalg.norm(delta)
        else:
            moved = delta @ W_K.T if name == "W_Q" else W_Q @ delta.T
            want["W_A"][i] = np.linalg.norm(moved)
    run = _run(snaps, n)
    dist = gflow.parameter_distance(run, ref)
    np.testing.assert_array_equal(dist["t"], ref.t)
    assert set(dist) == {"t", *want}
    for block, values in want.items():
        np.testing.assert_allclose(dist[block], values, rtol=1e-10, atol=0)
    cmp = gflow.compare(run, ref, threshold=0.5 * want["total"][1])
    for block in want:
        np.testing.assert_array_equal(cmp.distance[block], dist[block])
    assert cmp.departure_time == ref.t[1]
    assert cmp.error == dist["total"].max() and cmp.final_error == dist["total"][-1]


def test_moving_one_leaf_of_a_transformer_moves_only_its_distance():
    """A model without the W_E/W_P/W_A blocks is compared leaf by leaf: leaf i
    moved at time i + 1 is seen in its own entry only, by the norm of the move."""
    model = _transformer()  # W_E, W_Q, W_K, W_P
    leaves, treedef = jax.tree.flatten(model)
    n = 1 + len(leaves)
    ref = _run(_stacked(model, n), n)
    want = np.zeros((len(leaves), n))
    moved = []
    for i, leaf in enumerate(leaves):
        delta = 1e-3 * (i + 1) * np.ones(leaf.shape)
        stack = np.stack([np.asarray(leaf)] * n)
        stack[i + 1] += delta
        moved.append(stack)
        want[i, i + 1] = np.linalg.norm(delta)
    run = _run(jax.tree.unflatten(treedef, moved), n)
    dist = gflow.parameter_distance(run, ref)
    assert set(dist) == {"t", "total", *(f"leaf{i}" for i in range(len(leaves)))}
    for i in range(len(leaves)):
        np.testing.assert_allclose(dist[f"leaf{i}"], want[i], rtol=1e-12, atol=0)
    np.testing.assert_allclose(dist["total"], want.sum(0), rtol=1e-12, atol=0)


def test_a_traced_batch_with_an_id_outside_the_vocabulary_has_a_nan_loss():
    """Under jit (no concrete ids to check) the sequence loss of a batch holding the
    id d_vocab, or −1, is NaN; the largest valid id d_vocab − 1 keeps it finite.
    (JAX clamps an out-of-range index: without the guard the loss would be a
    plausible number.)

    Catches the guard's bound read as <= d_vocab."""
    model = MODELS["attention"]()
    loss = jax.jit(lambda tokens: gflow.sequence_loss(model, tokens))
    good = jnp.array([[0, 1, 2, D_VOCAB - 1]])
    assert np.isfinite(loss(good))
    for bad in (D_VOCAB, -1):
        assert np.isnan(loss(good.at[0, 2].set(bad))), bad
