"""The monitor for Flax nnx (issue 32 point 3): the sown attention of
nnx.MultiHeadAttention against attention recomputed from its kernels, and a
2-layer pre-LN GPT trained by an optax loop under nnx.jit, observed every 10."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from optional import needs

import gflow
from gflow import MarkovChain

nnx = needs("flax.nnx")

from gflow.monitor.flax_nnx import FlaxMonitor, attention_reading  # noqa: E402

V, S = 8, 12


class Block(nnx.Module):
    def __init__(self, m, h, rngs):
        self.ln1, self.ln2 = nnx.LayerNorm(m, rngs=rngs), nnx.LayerNorm(m, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(h, m, decode=False, rngs=rngs)
        self.up, self.down = (
            nnx.Linear(m, 2 * m, rngs=rngs),
            nnx.Linear(2 * m, m, rngs=rngs),
        )

    def __call__(self, x, mask):
        x = x + self.attn(self.ln1(x), mask=mask)
        return x + self.down(jax.nn.gelu(self.up(self.ln2(x))))


class TinyGPT(nnx.Module):
    def __init__(self, m=16, h=2, layers=2, *, rngs):
        self.tok, self.pos = nnx.Embed(V, m, rngs=rngs), nnx.Embed(S, m, rngs=rngs)
        self.blocks = nnx.List([Block(m, h, rngs) for _ in range(layers)])
        self.ln, self.out = nnx.LayerNorm(m, rngs=rngs), nnx.Linear(m, V, rngs=rngs)

    def __call__(self, x):
        z = self.tok(x) + self.pos(jnp.arange(x.shape[-1]))
        mask = nnx.make_causal_mask(x)
        for block in self.blocks:
            z = block(z, mask)
        return self.out(self.ln(z))


def _tokens(seed, b):
    chain = MarkovChain.from_lambda(pi=np.full(V, 1.0 / V), lam=0.6)
    return np.asarray(chain.sample(key=jax.random.key(seed), batch=b, length=S + 1))


@pytest.mark.slow  # CI's slow steps (7.6 s): the reductions it feeds are tested
# framework-free in the default suite (tests/test_monitor_core.py)
def test_sown_attention_is_the_kernels_softmax():
    model = TinyGPT(h=4, rngs=nnx.Rngs(0))
    probe = _tokens(1, 8)
    reading = attention_reading(model, probe[:, :-1])
    assert reading.attention.shape == (2, 4, 8, S, S)
    # layer 0 by hand: q, k from the kernels [m, h, k] on LayerNorm(embeddings)
    block = model.blocks[0]
    x = jnp.asarray(probe[:, :-1])
    z = block.ln1(model.tok(x) + model.pos(jnp.arange(S)))
    q = (
        jnp.einsum("bsm,mhk->bhsk", z, block.attn.query.kernel[...])
        + block.attn.query.bias[...].T[None, :, None, :]
    )
    k = (
        jnp.einsum("bsm,mhk->bhsk", z, block.attn.key.kernel[...])
        + block.attn.key.bias[...].T[None, :, None, :]
    )
    scores = jnp.einsum("bhik,bhjk->bhij", q, k) / np.sqrt(q.shape[-1])
    scores = jnp.where(jnp.tril(jnp.ones((S, S), bool)), scores, -jnp.inf)
    want = np.asarray(jax.nn.softmax(scores, axis=-1))  # [b, h, s, s]
    np.testing.assert_allclose(reading.attention[0], np.swapaxes(want, 0, 1), atol=1e-5)
    np.testing.assert_allclose(reading.logits, np.asarray(model(x))[:, -1], atol=1e-5)
    W_Q, W_K = reading.qk
    dense = np.linalg.svd(
        np.asarray(block.attn.query.kernel[...][:, 2])
        @ np.asarray(block.attn.key.kernel[...][:, 2]).T,
        compute_uv=False,
    )
    sig = gflow.Probe(probe, 0, [1]).signals(
        reading.attention, reading.logits, qk=reading.qk
    )
    np.testing.assert_allclose(sig["sv_W_A"][0, 2], dense[:4], rtol=1e-4)


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_an_optax_loop_is_observed_every_10_steps(tmp_path):
    model = TinyGPT(rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(3e-3), wrt=nnx.Param)
    data = _tokens(5, 60 * 16)
    probe = _tokens(2, 16)

    @nnx.jit
    def step(model, optimizer, batch):
        def loss_fn(model):
            logits = model(batch[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(
                logits, batch[:, 1:]
            ).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    before = jax.tree.map(np.asarray, nnx.state(model, nnx.Param))
    with FlaxMonitor(tmp_path / "m", every=10, verbose=False) as monitor:
        monitor.observe(0, model, probe)
        after_probe = jax.tree.map(np.asarray, nnx.state(model, nnx.Param))
        for i in range(60):
            step(model, optimizer, jnp.asarray(data[16 * i : 16 * i + 16]))
            monitor.observe(i + 1, model, probe)
    # the probe pass leaves the training model as it was (no sown state, same weights)
    jax.tree.map(np.testing.assert_array_equal, before, after_probe)
    assert not nnx.state(model, nnx.Intermediate)
    traj, _, cfg = gflow.load_monitor(tmp_path / "m")
    np.testing.assert_array_equal(traj.t, np.arange(0, 61, 10))
    assert traj.metrics["head_entropy"].shape == (7, 2, 2)
    assert traj.metrics["loss"][-1] < traj.metrics["loss"][0]
    last = attention_reading(model, probe[:, :-1])
    want = gflow.attention_signals(
        last.attention, probe, top=cfg["top"], tracked=cfg["tracked"]
    )
    np.testing.assert_allclose(traj.metrics["head_self"][-1], want.head_self, rtol=1e-6)


def test_a_model_without_attention_is_refused(tmp_path):
    class Plain(nnx.Module):
        def __init__(self):
            self.embed = nnx.Embed(V, V, rngs=nnx.Rngs(0))

        def __call__(self, x):
            return self.embed(x)

    with pytest.raises(ValueError, match="nothing to observe"):
        FlaxMonitor(tmp_path / "m", every=1, verbose=False).observe(
            0, Plain(), _tokens(1, 4)
        )
