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


def test_the_schedule_objects_are_their_four_numbers_and_their_clock():
    """Constant and WarmupCosine (issue 33 point 7: mutants of their fields, their
    check and ``rate`` survived the first extended mutation run): each keeps the
    numbers it is given, ``rate`` is the number or the schedule of those numbers in
    the dtype asked for, and ``clock`` is the running sum of the steps."""
    from gflow.dynamics import Constant, WarmupCosine

    c = Constant(0.25, total=7)
    assert (c.peak, c.warmup, c.total, c.final) == (0.25, 0, 7, 0.25)
    assert c.rate() == 0.25 and c.rate(np.float32) == 0.25
    np.testing.assert_array_equal(c.clock(np.arange(4)), [0.0, 0.25, 0.5, 0.75])
    np.testing.assert_array_equal(c(np.arange(3), xp=np), [0.25, 0.25, 0.25])
    s = WarmupCosine(0.3, 4, 10, final=0.05)
    assert (s.peak, s.warmup, s.total, s.final) == (0.3, 4, 10, 0.05)
    assert WarmupCosine(0.3, 4, 10).final == 0.0
    k = np.arange(12)
    want = warmup_cosine(k, np.float64(0.3), 4, 10, np.float64(0.05), xp=np)
    for dtype in (None, np.float64):
        got = np.asarray(s.rate(dtype)(k))
        np.testing.assert_allclose(got, want, rtol=1e-6 if dtype is None else 1e-15)
    assert np.asarray(s.rate(np.float64)(k)).dtype == np.float64
    eta = warmup_cosine(np.arange(10), np.float64(0.3), 4, 10, np.float64(0.05), xp=np)
    np.testing.assert_allclose(s.clock(np.array([0, 1, 10])), [0, 0, eta.sum()])
    WarmupCosine(0.3, 0, 10)  # the two ends of the warmup's range are allowed
    WarmupCosine(0.3, 10, 10)
    for bad in (-1, 11):
        with pytest.raises(ValueError, match=r"warmup must lie in \[0, total = 10\]"):
            WarmupCosine(0.3, bad, 10)
