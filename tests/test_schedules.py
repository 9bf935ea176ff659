"""The one warmup-cosine schedule: optax's values, traced or not, and the schedule
``gflow train`` runs (through the name table) is the one ``gflow text`` runs."""

import jax
import numpy as np
import optax
import pytest

from gflow.dynamics import warmup_cosine
from gflow.runs import SCHEDULES
from gflow.runs.train import TrainConfig


@pytest.mark.parametrize("w, final", [(7, 0.01), (0, 0.0), (1, 0.0), (29, 0.1)])
def test_warmup_cosine_is_optax_schedule(w, final):
    k = np.arange(40)
    ours = warmup_cosine(k, np.float64(0.3), w, 30, np.float64(final), xp=np)
    ref = optax.warmup_cosine_decay_schedule(0.0, 0.3, w, 30, final)(k)
    tol = 1e-12 if np.asarray(ref).dtype == np.float64 else 1e-6  # optax's dtype
    np.testing.assert_allclose(ours, ref, rtol=tol, atol=1e-9)
    traced = jax.jit(lambda k: warmup_cosine(k, 0.3, w, 30, final))(k)
    np.testing.assert_allclose(traced, ours, rtol=1e-6, atol=1e-7)  # float32


def test_train_runs_the_same_schedule_as_optax_gave_it():
    cfg = TrainConfig(schedule="warmup-cosine", lr=0.02, warmup=0.25, steps=40)
    ours = cfg.learning_rate()
    ref = optax.warmup_cosine_decay_schedule(
        0.0, 0.02, max(1, round(0.25 * cfg.total_steps)), cfg.total_steps
    )
    k = np.arange(cfg.total_steps + 3)
    np.testing.assert_allclose(
        np.asarray([ours(i) for i in k]), ref(k), rtol=1e-6, atol=1e-9
    )
    assert TrainConfig(lr=0.02).learning_rate() == 0.02  # constant: the number
    assert set(SCHEDULES) == {"constant", "warmup-cosine"}
