"""The stand-in benchmark's GD loop against the closed form of GD on a quadratic."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from benchmarks.standin import _within, cheapest_within, gd_final


class _Quadratic(eqx.Module):
    lam: jnp.ndarray

    def __call__(self, model):
        return 0.5 * jnp.sum(self.lam * model["x"] ** 2)


def test_gd_final_is_gd_in_closed_form_across_chunks():
    """x_k = (1 − η λ)^k x_0 per coordinate, k = t1/η, with the loop split in chunks
    (7 steps a chunk: 40 steps are 5 full chunks and one of 5)."""
    lam = jnp.asarray([0.5, 2.0, 9.0])
    x0 = {"x": jnp.asarray([1.0, -2.0, 0.5])}
    x, steps = gd_final(_Quadratic(lam), x0, lr=0.1, t1=4.0, chunk=7)
    assert steps == 40
    np.testing.assert_allclose(
        x, (1 - 0.1 * np.asarray(lam)) ** 40 * np.asarray(x0["x"]), rtol=1e-12
    )


def test_a_diverged_gd_is_never_within_delta():
    """Past 2/λ GD blows up: the loop stops early and the distance is no number."""
    x, _ = gd_final(
        _Quadratic(jnp.asarray([100.0])), {"x": jnp.ones(1)}, lr=1.0, t1=1e5, chunk=500
    )
    assert not np.all(np.isfinite(x))
    assert not _within({"distance": None}, 1e-3)
    assert _within({"distance": 1e-3}, 1e-3) and not _within({"distance": 2e-3}, 1e-3)


def test_the_pick_is_the_cheapest_run_within_delta_not_the_loosest():
    """A looser rtol can cost more steps: the pick is the fewest evaluations among
    the runs within δ; runs outside δ or diverged are never picked."""
    rows = [
        {"rtol": 1e-3, "grad_evals": 3000, "distance": 2e-3},
        {"rtol": 4e-4, "grad_evals": 5400, "distance": 9e-4},
        {"rtol": 3e-4, "grad_evals": 5200, "distance": 6e-4},
        {"rtol": 1e-4, "grad_evals": 5500, "distance": 1e-4},
        {"rtol": 1e-2, "grad_evals": 10, "distance": None},
    ]
    assert cheapest_within(rows, 1e-3)["rtol"] == 3e-4
    assert cheapest_within(rows, 1e-5) is None
