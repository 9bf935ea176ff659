"""The suite runs with jaxtyping's run-time checks on gflow (pyproject.toml addopts:
``--jaxtyping-packages=gflow,beartype.beartype(...)``), as Diffrax's does.

The plugin's import hook only instruments modules imported after it is installed; if
gflow were imported first (by a conftest.py, say) nothing would be checked and every
test would still pass. These tests fail in that case, and skip when the suite runs
without the option.
"""

import sys

import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
import pytest

import gflow


@pytest.fixture
def checks_on(request):
    packages = request.config.getoption("jaxtyping_packages", None) or ""
    if "gflow" not in packages.split(",")[:-1]:
        pytest.skip("the suite runs without --jaxtyping-packages=gflow,...")
    if jaxtyping.config.jaxtyping_disable:
        pytest.skip("JAXTYPING_DISABLE is set")


def test_every_gflow_module_went_through_the_import_hook(checks_on):
    modules = [m for name, m in sys.modules.items() if name.split(".")[0] == "gflow"]
    assert len(modules) > 30
    loaders = {m.__name__: type(m.__spec__.loader).__name__ for m in modules}
    assert {n: kind for n, kind in loaders.items() if kind != "_JaxtypingLoader"} == {}


def test_wrong_rank_dtype_and_size_are_refused(checks_on):
    model = gflow.AttentionModel.init(d_vocab=3, d_model=2, key=jax.random.key(0))
    pi = jnp.asarray([0.5, 0.3, 0.2])
    assert gflow.population_attention(model, pi).shape == (3, 3)
    with pytest.raises(jaxtyping.TypeCheckError, match="population_attention"):
        gflow.population_attention(model, jnp.ones((3, 3)))  # π is [d]
    with pytest.raises(jaxtyping.TypeCheckError, match="tokens"):
        gflow.sequence_loss(model, jnp.zeros((4, 3)))  # float tokens
    with pytest.raises(jaxtyping.TypeCheckError, match="token_coordinates"):
        gflow.token_coordinates(model.W_E, jnp.ones(4), 2)  # W_E [d, m], π [d]: d


def test_dataclass_fields_are_checked(checks_on):
    gflow.Trajectory(t=np.zeros(2), metrics={"loss": np.zeros(2)}, final=None)
    with pytest.raises(jaxtyping.TypeCheckError, match="Trajectory"):
        gflow.Trajectory(t=np.zeros((2, 2)), metrics={"loss": np.zeros(2)}, final=None)
