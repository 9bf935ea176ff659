"""The monitor's framework-free core (issue 32 point 1): gflow.attention_signals on
attention probabilities [layers, heads, batch, query, key] against the JAX
observables of the same model, and Monitor.record against Monitor.observe."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gflow
from gflow import MarkovChain, Monitor, Transformer
from gflow.analysis import HeadObservables
from gflow.monitor import AttentionSignals

CHAIN = MarkovChain.default()


def _setup():
    model = Transformer.init(
        d_vocab=4,
        d_model=8,
        n_layers=2,
        n_heads=2,
        init_scale=0.5,
        key=jax.random.key(3),
    )
    probe = CHAIN.sample(key=jax.random.key(1), batch=8, length=9)
    return model, np.asarray(probe)


def _attention(model, probe):
    """[l, h, b, s, s] from the model's own attention rows."""
    a = _rows(model, probe[:, :-1])  # [b, l, h, s, s]
    return np.moveaxis(np.asarray(a), 0, 2)


# the model's attention rows and last-position logits of each probe row, each
# compiled once (not run op by op)
_rows = eqx.filter_jit(lambda model, x: jax.vmap(model.attention)(x))
_logits = eqx.filter_jit(lambda model, x: jax.vmap(model)(x))


def test_attention_signals_equal_the_jax_observables():
    model, probe = _setup()
    obs = HeadObservables.default(probe, 4)
    # one compiled program (0.7 s) instead of the same arithmetic op by op (3.7 s)
    want = eqx.filter_jit(HeadObservables.__call__)(obs, model)
    got = gflow.attention_signals(
        _attention(model, probe), probe, top=int(obs.top), tracked=obs.tracked
    )
    assert isinstance(got, AttentionSignals)
    for k, v in got.as_dict().items():
        np.testing.assert_allclose(v, want[k], rtol=1e-6, atol=1e-7, err_msg=k)


def test_uniform_attention_has_entropy_log_s(unchecked):
    s = 5
    a = np.full((1, 2, 3, s, s), 1.0 / s)
    probe = np.arange(3 * (s + 1)).reshape(3, s + 1) % 4
    sig = gflow.attention_signals(a, probe, top=0, tracked=[1])
    np.testing.assert_allclose(sig.head_entropy, np.log(s))
    with pytest.raises(ValueError, match="attention must be"):
        gflow.attention_signals(a[:, :, :2], probe, top=0, tracked=[1])


def test_record_writes_what_observe_writes(tmp_path):
    model, probe = _setup()
    obs = HeadObservables.default(probe, 4)
    with Monitor(tmp_path / "jax", every=1, n_sv=2, verbose=False) as mon:
        mon.observe(0, model, probe)
    traj, _, _ = gflow.load_monitor(tmp_path / "jax")
    # the probe loss against numpy: each sequence's last token under the model's
    # logits at the position before it, row by row
    logits = np.asarray(_logits(model, jnp.asarray(probe[:, :-1])), float)
    top = logits.max(axis=1, keepdims=True)
    logp = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    want = -np.mean(logp[np.arange(len(probe)), probe[:, -1]])
    np.testing.assert_allclose(traj.metrics["loss"][0], want, rtol=1e-5)
    sig = gflow.attention_signals(
        _attention(model, probe), probe, top=int(obs.top), tracked=obs.tracked
    )
    with Monitor(tmp_path / "np", every=1, verbose=False) as rec:
        rec.record(0, sig, loss=float(traj.metrics["loss"][0]))
        with pytest.raises(ValueError, match="increase"):
            rec.record(0, sig, loss=1.0)
        with pytest.raises(ValueError, match="lack"):
            rec.record(1, sig)
    mine, _, cfg = gflow.load_monitor(tmp_path / "np")
    assert cfg["probe_shape"] is None
    for k in sig.as_dict():
        np.testing.assert_allclose(mine.metrics[k], traj.metrics[k], rtol=1e-6)
    # the framework-free probe path gives the stage rules' two conditions as the
    # JAX monitor does (the information gate and the frequent token)
    framework = gflow.Probe(probe, int(obs.top), obs.tracked).signals(
        _attention(model, probe), logits
    )
    for k in ("loss", "unigram_gap", "top_dominance"):
        np.testing.assert_allclose(framework[k], traj.metrics[k][0], rtol=1e-5)
