"""``gflow train --data icl-markov`` (issue 30 point 1 on the command line): the
in-context Markov task as a named data set of the one training job, with the
strategies' losses as references and the KL distance to each strategy recorded."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gflow
from gflow.analysis import strategy_distances
from gflow.cli import main
from gflow.runs import DATASETS, ConfigError
from gflow.runs.train import TrainConfig, prepare


def test_the_task_is_a_named_data_set_with_its_strategy_losses():
    cfg = TrainConfig(data="icl-markov", states=2, alpha=1.0, seq_len=4, eval_batch=8)
    data = prepare(cfg)
    assert data.d_vocab == 2 and data.eval_tokens.shape == (8, 5)
    assert set(np.unique(data.eval_tokens)) <= {0, 1}
    refs = data.references
    # the uniform predictor's loss is ln k exactly; the exact enumeration of
    # length 5 sequences orders the strategies (a better model of the task is
    # never worse in expectation)
    assert refs["uniform_loss"] == pytest.approx(math.log(2), rel=1e-6)
    assert refs["bigram_loss"] < refs["unigram_loss"] < refs["uniform_loss"]
    want = gflow.InContextMarkov(states=2).strategy_losses(5)
    assert refs["bigram_loss"] == pytest.approx(want.of("bigram")[0], rel=1e-6)
    assert refs["known_matrix_loss"] < refs["bigram_loss"]
    assert "icl-markov" in DATASETS and "markov" in DATASETS


def test_bad_task_settings_are_one_config_error():
    with pytest.raises(ConfigError, match="states"):
        TrainConfig(data="icl-markov", states=1)
    with pytest.raises(ConfigError, match="alpha"):
        TrainConfig(data="icl-markov", alpha=0.0)
    with pytest.raises(ConfigError, match="icl-markov"):
        TrainConfig(data="no-such-data-set")


def test_default_markov_runs_keep_their_fingerprint_settings():
    # the task's settings at their defaults are left out of the fingerprint, so a
    # Markov run saved before them still resumes
    from gflow.runs.train import LATER_SETTINGS

    assert LATER_SETTINGS["states"] == TrainConfig().states
    assert LATER_SETTINGS["alpha"] == TrainConfig().alpha


@pytest.mark.slow  # a short training run through the command line
def test_train_records_the_kl_distance_to_each_strategy(tmp_path):
    out = tmp_path / "icl"
    argv = [
        "--quiet",
        "train",
        "--data",
        "icl-markov",
        "--states",
        "2",
        "--alpha",
        "2.0",
        "--layers",
        "2",
        "--heads",
        "1",
        "--d-model",
        "8",
        "--steps",
        "20",
        "--segments",
        "2",
        "--num-saves",
        "3",
        "--batch",
        "8",
        "--seq-len",
        "8",
        "--eval-batch",
        "16",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    run = gflow.load_run(out)
    traj = run.trajectories["train"]
    doc = json.loads((out / "config.json").read_text())
    assert doc["config"]["data"] == "icl-markov" and doc["config"]["states"] == 2
    assert doc["config"]["alpha"] == 2.0
    assert set(doc["references"]) >= {"uniform_loss", "unigram_loss", "bigram_loss"}
    # the recorded KL of the final model is the one computed here, independently
    cfg = TrainConfig(data="icl-markov", states=2, alpha=2.0, seq_len=8, eval_batch=16)
    tokens = jax.numpy.asarray(prepare(cfg).eval_tokens)
    model = traj.final
    logits = jax.vmap(model.causal_logits)(tokens)
    task = gflow.InContextMarkov(states=2, alpha=2.0)
    q = task.strategy_probabilities(tokens)[:, :, :-1]
    log_p = jax.nn.log_softmax(logits[:, :-1], axis=-1)
    kl = np.asarray(np.sum(q * (np.log(q) - log_p[None]), axis=-1).mean(axis=(1, 2)))
    for g, v in zip(("uniform", "unigram", "bigram"), kl):
        np.testing.assert_allclose(traj.metrics[f"kl_{g}"][-1], v, rtol=1e-4)


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_the_strategy_distances_read_only_the_contexts():
    """A model with learned positions for exactly the context (max_len = s) is
    observed on s + 1 tokens; the KL uses the predictions at positions 0..s-1,
    which the causal model computes the same from the contexts alone."""
    source = DATASETS.build("icl-markov", states=3, alpha=1.0)
    tokens = np.asarray(source.sample(key=jax.random.key(0), batch=4, length=6))
    positional = gflow.Transformer.init(
        d_vocab=3, d_model=4, max_len=5, init_scale=0.5, key=jax.random.key(1)
    )
    assert set(source.observe(positional, tokens)) == {
        "kl_uniform",
        "kl_unigram",
        "kl_bigram",
    }
    plain = gflow.Transformer.init(
        d_vocab=3, d_model=4, init_scale=0.5, key=jax.random.key(1)
    )
    logits = jax.vmap(plain.causal_logits)(jnp.asarray(tokens))  # all n positions
    want = strategy_distances(source.task, logits, jnp.asarray(tokens))
    got = source.observe(plain, tokens)
    for g in ("uniform", "unigram", "bigram"):
        assert got[f"kl_{g}"] == pytest.approx(getattr(want, g), rel=1e-10)
