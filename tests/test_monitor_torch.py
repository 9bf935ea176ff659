"""The monitor in PyTorch (issue 32 point 2): attention read by hooks on
torch.nn.MultiheadAttention and from a transformers model's output_attentions,
checked against attention recomputed from the weights; a plain PyTorch loop; the
Hugging Face Trainer callback, its clock and its resume from a checkpoint."""

import json

import numpy as np
import pytest
from optional import needs

import gflow
from gflow import MarkovChain

torch = needs("torch")
nn = torch.nn
# one thread: the default suite runs two workers on two cores, each with XLA too
torch.set_num_threads(1)

from gflow.monitor.pytorch import (  # noqa: E402
    HuggingFaceAttention,
    MultiheadAttentionHooks,
    TorchMonitor,
    torch_signals,
)

V, S = 8, 12  # vocabulary, context length


def _probe(seed=1, b=16):
    chain = MarkovChain.from_lambda(pi=np.full(V, 1.0 / V), lam=0.6)
    import jax

    return np.asarray(
        chain.sample(key=jax.random.key(seed), batch=b, length=S + 1), dtype=np.int64
    )


class OneAttention(nn.Module):
    """Embedding, one causal MultiheadAttention, unembedding: the attention is the
    embedding's, so a test can recompute it from the weights."""

    def __init__(self, m=16, h=4):
        super().__init__()
        self.embed = nn.Embedding(V, m)
        self.attn = nn.MultiheadAttention(m, h, batch_first=True)
        self.out = nn.Linear(m, V)

    def forward(self, x):
        z = self.embed(x)
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        y, _ = self.attn(z, z, z, attn_mask=mask, need_weights=False)
        return self.out(z + y)


class Block(nn.Module):
    def __init__(self, m, h):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(m), nn.LayerNorm(m)
        self.attn = nn.MultiheadAttention(m, h, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(m, 2 * m), nn.GELU(), nn.Linear(2 * m, m))

    def forward(self, x, mask):
        y = self.ln1(x)
        x = x + self.attn(y, y, y, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Pre-LayerNorm residual blocks with MLPs and learned positions."""

    def __init__(self, m=16, h=2, layers=2):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, m), nn.Embedding(S, m)
        self.blocks = nn.ModuleList([Block(m, h) for _ in range(layers)])
        self.ln, self.out = nn.LayerNorm(m), nn.Linear(m, V)

    def forward(self, x):
        z = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        for block in self.blocks:
            z = block(z, mask)
        return self.out(self.ln(z))


def _heads_by_hand(mha, z, mask):
    """softmax(q_h k_hᵀ / √k + mask) from the layer's own projection weights."""
    m, h = mha.embed_dim, mha.num_heads
    W, b = mha.in_proj_weight.detach(), mha.in_proj_bias.detach()
    q = (z @ W[:m].T + b[:m]).reshape(*z.shape[:2], h, m // h).transpose(1, 2)
    k = (z @ W[m : 2 * m].T + b[m : 2 * m]).reshape(*z.shape[:2], h, m // h)
    scores = q @ k.permute(0, 2, 3, 1) / np.sqrt(m // h) + mask
    return torch.softmax(scores, dim=-1)  # [b, h, s, s]


def test_hooks_read_the_attention_the_weights_give():
    torch.manual_seed(0)
    model = OneAttention().eval()
    probe = _probe()
    x = torch.tensor(probe[:, :-1])
    with torch.no_grad():
        reading = MultiheadAttentionHooks().read(model, x)
        mask = nn.Transformer.generate_square_subsequent_mask(S)
        want = _heads_by_hand(model.attn, model.embed(x), mask).numpy()
        logits = model(x)[:, -1].numpy()
    np.testing.assert_allclose(reading.attention[0], np.swapaxes(want, 0, 1), atol=1e-6)
    np.testing.assert_allclose(reading.logits, logits, atol=1e-6)
    # σ(W_Q,h W_K,hᵀ) against a dense SVD of the m × m product
    W_Q, W_K = reading.qk
    m = model.attn.embed_dim
    Wq = model.attn.in_proj_weight.detach().numpy()[:m].T
    Wk = model.attn.in_proj_weight.detach().numpy()[m : 2 * m].T
    for head in range(4):
        cols = slice(head * 4, head * 4 + 4)
        dense = np.linalg.svd(Wq[:, cols] @ Wk[:, cols].T, compute_uv=False)[:4]
        np.testing.assert_allclose(
            gflow.Probe(probe, 0, [1]).signals(
                reading.attention.numpy(), reading.logits, qk=(W_Q, W_K)
            )["sv_W_A"][0, head],
            dense,
            rtol=1e-5,
        )


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_a_plain_loop_is_monitored_without_touching_its_training(tmp_path):
    """120 AdamW steps of a 2-layer pre-LN GPT on fresh Markov batches, observed
    every 10:
    the rows are those steps, the probe signals equal attention_signals of the
    hooked attention, and the run's parameters are those of the same loop without
    the monitor (the probe pass changes nothing)."""
    probe = _probe(seed=2)
    chain = MarkovChain.from_lambda(pi=np.full(V, 1.0 / V), lam=0.6)
    import jax

    data = np.asarray(
        chain.sample(key=jax.random.key(5), batch=120 * 16, length=S + 1),
        dtype=np.int64,
    )

    def train(monitor):
        torch.manual_seed(0)
        model = TinyGPT()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        for step in range(120):  # a fresh batch of 16 sequences each step
            batch = torch.tensor(data[16 * step : 16 * step + 16])
            x, y = batch[:, :-1], batch[:, 1:]
            loss = nn.functional.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if monitor is not None:
                monitor.observe(step + 1, model, probe)
        return model

    with TorchMonitor(tmp_path / "m", every=10, verbose=False) as monitor:
        monitored = train(monitor)
    plain = train(None)
    for a, b in zip(monitored.parameters(), plain.parameters()):
        assert torch.equal(a, b)
    assert monitored.training
    traj, _, cfg = gflow.load_monitor(tmp_path / "m")
    np.testing.assert_array_equal(traj.t, np.arange(10, 121, 10))
    assert cfg["probe_shape"] == list(probe.shape) and cfg["tracked"]
    assert traj.metrics["sv_W_A"].shape == (12, 2, 2, 4)
    # the last row against the attention hooked out of the final model by hand
    with torch.no_grad():
        reading = MultiheadAttentionHooks().read(
            monitored.eval(), torch.tensor(probe[:, :-1])
        )
    last = gflow.attention_signals(
        reading.attention.numpy(), probe, top=cfg["top"], tracked=cfg["tracked"]
    )
    np.testing.assert_allclose(
        traj.metrics["head_entropy"][-1], last.head_entropy, rtol=1e-6
    )
    assert traj.metrics["loss"][-1] < traj.metrics["loss"][0]


def test_bad_models_and_probes_are_refused(tmp_path):
    monitor = TorchMonitor(tmp_path / "m", every=1, verbose=False)
    with pytest.raises(TypeError, match="cannot read"):
        monitor.observe(0, nn.Linear(3, 3), _probe())
    with pytest.raises(ValueError, match="outside"):
        monitor.observe(0, OneAttention(), _probe() + V)
    monitor.observe(0, OneAttention(), _probe())
    with pytest.raises(ValueError, match="shape"):
        monitor.observe(1, OneAttention(), _probe()[:, 1:])


def test_a_new_probe_batch_gets_its_own_masks(tmp_path):
    # the torch reduction keeps the probe's masks; new tokens of the same shape
    # must be reduced with theirs, as gflow.attention_signals reduces them
    torch.manual_seed(0)
    model = OneAttention().eval()
    monitor = TorchMonitor(tmp_path / "m", every=1, verbose=False)
    monitor.observe(0, model, _probe(seed=1))
    other = _probe(seed=2)
    monitor.observe(1, model, other)
    monitor.close()
    traj, _, cfg = gflow.load_monitor(tmp_path / "m")
    with torch.no_grad():
        reading = MultiheadAttentionHooks().read(model, torch.tensor(other[:, :-1]))
    want = gflow.attention_signals(
        reading.attention.numpy(), other, top=cfg["top"], tracked=cfg["tracked"]
    )
    np.testing.assert_allclose(traj.metrics["head_self"][-1], want.head_self, rtol=1e-5)
    np.testing.assert_allclose(
        traj.metrics["head_on_top"][-1], want.head_on_top, rtol=1e-5
    )


# -- Hugging Face ------------------------------------------------------------------


def _gpt2(implementation="eager", vocab=V, seed=0):
    transformers = needs("transformers")
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        vocab_size=vocab,
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=4,
        bos_token_id=0,
        eos_token_id=0,
        attn_implementation=implementation,
    )
    return transformers.GPT2LMHeadModel(config)


def test_huggingface_attention_is_causal_and_its_loss_is_torchs():
    model = _gpt2().eval()
    probe = _probe()
    x = torch.tensor(probe[:, :-1])
    with torch.no_grad():
        reading = HuggingFaceAttention().read(model, x)
        logits = model(input_ids=x).logits[:, -1]
        want_loss = nn.functional.cross_entropy(logits, torch.tensor(probe[:, -1]))
    a = reading.attention.numpy()  # the reader's tensor, on the model's device
    assert a.shape == (2, 4, 16, S, S)
    np.testing.assert_allclose(a.sum(-1), 1.0, atol=1e-6)
    assert np.all(np.triu(a, k=1) == 0)  # no query attends to a later key
    sig = gflow.Probe(probe, 0, [1]).signals(a, reading.logits, qk=reading.qk)
    np.testing.assert_allclose(sig["loss"], float(want_loss), rtol=1e-6)
    # GPT-2's c_attn (x @ W, W [m, 3m]): head 1 of layer 1 against a dense SVD
    W = model.transformer.h[1].attn.c_attn.weight.detach().numpy()
    Wq, Wk = W[:, 8:16], W[:, 40:48]
    dense = np.linalg.svd(Wq @ Wk.T, compute_uv=False)[:4]
    np.testing.assert_allclose(sig["sv_W_A"][1, 1], dense, rtol=1e-5)


def test_a_fused_attention_model_is_read_in_eager_for_the_probe_alone():
    """An sdpa model (the default) is switched to eager for the probe pass and back:
    the same signals as the model built eager; with switch=False it is refused."""
    probe = _probe()
    fused, eager = _gpt2("sdpa"), _gpt2("eager")
    with torch.no_grad():
        a = HuggingFaceAttention().read(fused.eval(), torch.tensor(probe[:, :-1]))
        b = HuggingFaceAttention().read(eager.eval(), torch.tensor(probe[:, :-1]))
    assert fused.config._attn_implementation == "sdpa"
    np.testing.assert_allclose(a.attention, b.attention, atol=1e-6)
    np.testing.assert_allclose(a.logits, b.logits, atol=1e-5)
    with pytest.raises(ValueError, match='attn_implementation="eager"'):
        TorchMonitor(
            "unused", every=1, reader=HuggingFaceAttention(switch=False), verbose=False
        ).observe(0, fused, probe)


def _trainer(out, callback, steps, *, stop_at=None, seed=0):
    transformers = needs("transformers")
    data = _probe(seed=7, b=64)
    rows = [{"input_ids": r, "labels": r} for r in torch.tensor(data)]

    class Stop(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if stop_at is not None and state.global_step >= stop_at:
                control.should_training_stop = True

    args = transformers.TrainingArguments(
        output_dir=str(out),
        max_steps=steps,
        per_device_train_batch_size=8,
        learning_rate=1e-3,
        lr_scheduler_type="linear",
        save_steps=20,
        save_strategy="steps",
        logging_strategy="no",
        report_to=[],
        seed=seed,
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    return transformers.Trainer(
        model=_gpt2(seed=seed),
        args=args,
        train_dataset=rows,
        callbacks=[callback, Stop()],
    )


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_trainer_callback_clock_and_resume(tmp_path):
    """A Trainer killed after its step-20 checkpoint and resumed from it writes the
    monitor of the run never interrupted; t is Σ η of the linear schedule."""
    from gflow.monitor.huggingface import CLOCK_FILE, MonitorCallback

    probe = _probe()
    whole = MonitorCallback(tmp_path / "whole", probe, every=10, verbose=False)
    _trainer(tmp_path / "a", whole, 40).train()
    traj, _, cfg = gflow.load_monitor(tmp_path / "whole")
    np.testing.assert_array_equal(traj.metrics["loss"].shape, (5,))
    eta = 1e-3 * (1 - np.arange(40) / 40)  # the linear schedule, no warmup
    clock = np.concatenate([[0.0], np.cumsum(eta)])[::10]
    np.testing.assert_allclose(traj.t, clock, rtol=1e-6)
    assert (
        json.loads((tmp_path / "a" / "checkpoint-20" / CLOCK_FILE).read_text())["step"]
        == 20
    )

    part = MonitorCallback(tmp_path / "part", probe, every=10, verbose=False)
    _trainer(tmp_path / "b", part, 40, stop_at=25).train()
    cut, _, _ = gflow.load_monitor(tmp_path / "part")
    assert len(cut.t) == 3  # steps 0, 10, 20: the process "dies" after step 25
    again = MonitorCallback(tmp_path / "part", probe, every=10, verbose=False)
    _trainer(tmp_path / "b", again, 40).train(resume_from_checkpoint=True)
    resumed, _, _ = gflow.load_monitor(tmp_path / "part")
    np.testing.assert_allclose(resumed.t, traj.t, rtol=1e-12)
    for k in ("loss", "head_entropy", "sv_W_A"):
        np.testing.assert_allclose(
            resumed.metrics[k], traj.metrics[k], rtol=1e-5, err_msg=k
        )


@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_the_torch_reduction_is_the_numpy_one(dtype, rtol):
    # torch_signals (reduce_attention in torch, on the tensor's device) against
    # gflow.attention_signals in NumPy float64, on random causal rows with
    # repeated tokens, so every mask and every masked mean has something to weigh
    rng = np.random.default_rng(3)
    probe = gflow.Probe.default(rng.integers(0, 5, size=(6, 11)), 5, n_tracked=2)
    logits = rng.normal(size=(2, 3, 6, 10, 10)) + np.triu(
        np.full((10, 10), -np.inf), k=1
    )
    attention = np.exp(logits - logits.max(-1, keepdims=True))
    attention /= attention.sum(-1, keepdims=True)
    want = gflow.attention_signals(
        attention, probe.tokens, top=probe.top, tracked=probe.tracked
    )
    got = torch_signals(torch.tensor(attention, dtype=dtype), probe)
    for name, value in want.as_dict().items():
        np.testing.assert_allclose(getattr(got, name), value, rtol=rtol, atol=1e-7)
        assert np.any(value != 0), name
