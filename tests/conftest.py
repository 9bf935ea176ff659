"""Test configuration: tests are an entry point, so they choose float64 here."""

import jax
import pytest

from gflow import AttentionModel, MarkovChain, PopulationLoss

jax.config.update("jax_enable_x64", True)


@pytest.fixture(autouse=True)
def _float64_everywhere():
    """CLI handlers called in-process choose their own precision (`gflow text` runs
    GD in float32): give every test float64 back afterwards."""
    yield
    jax.config.update("jax_enable_x64", True)


@pytest.fixture
def key():
    return jax.random.key(0)


@pytest.fixture(scope="module")
def setup():
    """(loss_fn, model): a small 3-token chain and model whose flow moves quickly."""
    chain = MarkovChain.from_lambda(pi=(0.6, 0.3, 0.1), lam=0.5)
    model = AttentionModel.init(
        d_vocab=3, d_model=3, init_scale=0.3, key=jax.random.key(1)
    )
    return PopulationLoss(chain), model
