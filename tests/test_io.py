import jax
import numpy as np
import optax
import pytest

from gflow import AttentionModel, MarkovChain, PopulationLoss, run_optimizer
from gflow.runs import atomic_write_bytes, load_trajectory, save_trajectory


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    atomic_write_bytes(tmp_path / "a.txt", b"one")
    atomic_write_bytes(tmp_path / "a.txt", b"two")
    assert (tmp_path / "a.txt").read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_trajectory_round_trip(tmp_path):
    chain = MarkovChain.from_lambda(pi=(0.6, 0.3, 0.1), lam=0.5)
    model = AttentionModel.init(
        d_vocab=3, d_model=3, init_scale=0.3, key=jax.random.key(1)
    )
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
    obs = {"sv": lambda m: jax.numpy.linalg.svd(m.W_E, compute_uv=False)}
    tr = run_optimizer(
        PopulationLoss(chain),
        model,
        opt,
        steps=6,
        save_every=2,
        save_params=True,
        observables=obs,
    )
    save_trajectory(tmp_path, tr, name="gd")
    back = load_trajectory(tmp_path, name="gd")
    np.testing.assert_array_equal(back.t, tr.t)
    for k in tr.metrics:
        np.testing.assert_array_equal(back.metrics[k], tr.metrics[k])
    for a, b in zip(jax.tree.leaves(back.final), jax.tree.leaves(tr.final)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(back.snapshot(2).W_Q, tr.snapshot(2).W_Q)
    assert back.status == tr.status
    header = (tmp_path / "gd_metrics.csv").read_text().splitlines()[0].split(",")
    assert header[:3] == ["t", "loss", "grad_norm"] and "sv_2" in header


def test_missing_run_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="run directory"):
        load_trajectory(tmp_path / "nope")
