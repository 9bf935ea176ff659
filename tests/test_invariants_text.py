"""gflow's full-batch loop on the flow clock (``gflow.text.run_full_batch``, what
``gflow text`` and ``gflow train --batch 0`` run), against closed forms (issue 58,
point 1).

On a flat loss Adam's direction is 0/(√0 + ε) = 0, so AdamW moves the parameters
by its decoupled weight decay alone: p_k = (1 − ηλ)^k p_0 at every save. With a
steep loss and a huge step the first step blows the parameters up: the run
diverges at step 0 and its clock stops there. One compiled loop serves both runs
(the loss's curvature, the step and the decay are traced). The minibatch loss of
``gflow text`` in its counts form is the sequence loss it stands for.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import gflow
from gflow.dynamics import AdamW
from gflow.text import WindowStream, batch_loss, query_windows, run_full_batch


class Bowl(eqx.Module):
    """L(p) = ½ c |p|²: flat with c = 0."""

    c: jax.Array

    def __call__(self, model):
        return 0.5 * self.c * jnp.sum(model["w"] ** 2)


P0 = {"w": jnp.array([1.0, -2.0, 0.5])}


def _run(c, lr, decay):
    return run_full_batch(
        Bowl(jnp.asarray(c)),
        P0,
        optimizer=AdamW(weight_decay=decay),
        learning_rate=lr,
        steps=6,
        num_saves=3,
    )


def test_adamw_on_a_flat_loss_is_its_weight_decay_at_every_save():
    """Saves at steps 0, 2, 4 and 6, each (1 − ηλ)^k p_0, on the clock t = η k.

    Catches the decay added with the wrong sign ((1 + ηλ)^k), and the final save
    written over the last regular one (step 4's slot)."""
    eta, decay = 0.1, 0.5
    run = _run(0.0, eta, decay)
    k = np.array([0, 2, 4, 6])
    np.testing.assert_allclose(run.t, eta * k, rtol=1e-12)
    want = (1 - eta * decay) ** k[:, None] * np.asarray(P0["w"])
    np.testing.assert_allclose(run.params["w"], want, rtol=1e-12)
    np.testing.assert_allclose(run.final["w"], want[-1], rtol=1e-12)


def test_a_run_that_blows_up_at_its_first_step_keeps_its_clock_there():
    """η = 1e9 on a steep bowl: diverged at step 0, every save's time is 0 (the
    clock stops at the bad step) and the saves after the first are NaN.

    Catches the clock running on after a divergence."""
    run = _run(1.0, 1e9, 0.0)
    assert run.status == "diverged" and run.stats["diverged_step"] == 0
    np.testing.assert_array_equal(run.t, 0.0)
    assert np.isfinite(run.metrics["loss"][0])
    assert np.all(np.isnan(run.metrics["loss"][1:]))


def test_a_minibatchs_counts_form_is_its_sequence_loss():
    """``gflow.text.batch_loss`` (the counts form, which the text minibatch loop
    uses for a small vocabulary) is ``gflow.sequence_loss``'s last-token loss on
    the same windows, compiled as inside the loop.

    Catches the in-jit counts made over whole windows (the target counted as a
    context token)."""
    rng = np.random.default_rng(0)
    windows = jnp.asarray(rng.integers(0, 5, size=(12, 6)), jnp.int32)
    model = gflow.AttentionModel.init(
        d_vocab=5, d_model=4, init_scale=0.7, key=jax.random.key(3)
    )
    counts, plain = jax.jit(
        lambda m, w: (batch_loss(m, w), gflow.sequence_loss(m, w, dense=False))
    )(model, windows)
    np.testing.assert_allclose(counts, plain, rtol=1e-12)


def test_windows_are_drawn_from_every_start_and_cut_at_their_query():
    """A ``WindowStream`` over ids 0 .. n−1 (so a window names its start) draws
    contiguous windows of length + 1 tokens from every start 0 .. n − length − 1,
    the first included; ``query_windows`` ends each window's context at its
    query (the window's second-to-last token), its target after it.

    Catches the first start never drawn, and the query windows shifted one token
    early (the query then the target)."""
    length, n = 4, 7
    ids = np.arange(n)
    windows = np.asarray(WindowStream(ids, length=length, batch=64)(jax.random.key(0)))
    starts = windows[:, 0]
    np.testing.assert_array_equal(windows, starts[:, None] + np.arange(length + 1))
    assert set(starts) == set(range(n - length))  # 0, 1, 2: every start
    stream = np.array([3, 1, 4, 1, 5, 2, 6, 5, 3, 5, 0])
    for q in (1, 5):
        got = query_windows(stream, [q], length=3, per_query=5)
        assert len(got) > 0 and np.all(got[:, -2] == q), (q, got)
        runs = {tuple(stream[j : j + 4]) for j in range(len(stream) - 3)}
        assert all(tuple(w) in runs for w in got)  # contiguous in the stream
