"""Traced programs on disk (``gflow.runs.program_cache``, issue 12.3).

A stored program must give the solve exactly as it was traced, in a later process as
in the first one, statuses included; anything it cannot key safely (a user's
function or Module, an object known by its address) or cannot export (host
callbacks) must run as before and write nothing.
"""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gflow
from gflow.problems import PopulationLoss
from gflow.runs import describe

TSIT5 = diffrax.Tsit5()  # a smaller program than the default's: quicker to export


@pytest.fixture
def errors_as_nan(monkeypatch):
    """Equinox's checks as NaN, as the ``gflow`` command sets them with its cache."""
    monkeypatch.setenv("EQX_ON_ERROR", "nan")
    monkeypatch.setattr(eqx._errors, "EQX_ON_ERROR", "nan")
    monkeypatch.setattr(eqx._config, "EQX_ON_ERROR", "nan")
    # jitted helpers traced by earlier tests keep their checks as host callbacks
    jax.clear_caches()
    yield
    jax.clear_caches()  # nor may these NaN-mode traces reach later tests


@pytest.fixture
def problem():
    chain = gflow.MarkovChain.from_lambda(pi=(0.6, 0.3, 0.1), lam=0.5)
    model = gflow.AttentionModel.init(
        d_vocab=3, d_model=2, init_scale=0.3, key=jax.random.key(3)
    )
    return PopulationLoss(chain), model


def _solve(problem, cache, **more):
    loss, model = problem
    kwargs = dict(t1=3.0, ts=np.linspace(0, 3, 4), save_params=True, solver=TSIT5)
    kwargs |= dict(progress=False)
    kwargs |= more
    return gflow.solve_flow(loss, model, program_cache=cache, **kwargs)


def _same(a, b):
    assert a.status == b.status and a.stats == b.stats
    np.testing.assert_array_equal(a.t, b.t)
    for k in a.metrics:
        np.testing.assert_array_equal(a.metrics[k], b.metrics[k])
    for x, y in zip(jax.tree.leaves(a.final), jax.tree.leaves(b.final)):
        np.testing.assert_array_equal(x, y)
        assert x.dtype == y.dtype
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)):
        np.testing.assert_array_equal(x, y)


# in CI's slow steps (.ci/run): keeps the default suite near 3 min; the key test stays
@pytest.mark.slow
def test_a_stored_program_is_the_solve_and_a_new_cache_reads_it(
    problem, tmp_path, errors_as_nan
):
    plain = _solve(problem, None)
    first = gflow.ProgramCache(tmp_path)
    stored = _solve(problem, first)
    assert (first.writes, first.hits, first.fallbacks) == (1, 0, 0)
    (artifact,) = tmp_path.iterdir()
    assert artifact.name.startswith("_solve_arrays-")
    # the exported program is the traced one: the same numbers as plain jit
    for k in plain.metrics:
        np.testing.assert_allclose(stored.metrics[k], plain.metrics[k], rtol=1e-12)
    assert stored.status == plain.status == "success"
    assert stored.stats == plain.stats
    # a later process (a new instance) reads it back and gets the same bits
    second = gflow.ProgramCache(tmp_path)
    again = _solve(problem, second)
    assert (second.writes, second.hits, second.fallbacks) == (0, 1, 0)
    _same(stored, again)
    # the parameter snapshots come back in the model's shapes
    assert again.params.W_E.shape == (4, 3, 2)
    # JAX arrays, as before: a model is indexed with traced tokens under jit or vmap
    assert isinstance(again.final.W_E, jax.Array)
    assert isinstance(again.params.W_E, jax.Array)
    np.testing.assert_array_equal(again.params.W_E[0], problem[1].W_E)


@pytest.mark.slow  # in CI's slow steps (.ci/run): keeps the default suite near 3 min
def test_statuses_hold_through_a_stored_program(problem, tmp_path, errors_as_nan):
    cache = gflow.ProgramCache(tmp_path)
    short = _solve(problem, cache, max_steps=2)
    assert short.status == "max_steps" and short.stats["num_steps"] == 2
    assert short.stats["t_reached"] < 3.0
    # a non-finite start: the loss is NaN and the status says so
    loss, model = problem
    bad = eqx.tree_at(lambda m: m.W_E, model, model.W_E.at[0, 0].set(jnp.nan))
    out = gflow.solve_flow(
        loss,
        bad,
        t1=3.0,
        max_steps=50,
        solver=TSIT5,
        program_cache=cache,
        progress=False,
    )
    assert out.status == "diverged"
    # each static setting is its own program: max_steps 2 and 50, two ts lengths
    assert cache.writes == 2 and len(list(tmp_path.iterdir())) == 2


@pytest.mark.slow  # 9 s; the cache's hit and miss tests stay in the default run
def test_the_key_follows_static_settings_and_shapes(problem, tmp_path, errors_as_nan):
    cache = gflow.ProgramCache(tmp_path)
    _solve(problem, cache, max_steps=100)
    _solve(problem, cache, max_steps=200)  # a static int: a new program
    _solve(problem, cache, max_steps=200, ts=np.linspace(0, 3, 5))  # a new shape
    _solve(problem, cache, max_steps=200, rtol=1e-7)  # traced: the same program
    assert cache.writes == 3 and cache.hits == 0


class _UsersLoss(eqx.Module):
    """A user's Module: its code could change under the same class name."""

    chain: object

    def __call__(self, model):
        return PopulationLoss(self.chain)(model)


@pytest.mark.slow  # in CI's last step
def test_what_cannot_be_keyed_or_exported_runs_as_before(
    problem, tmp_path, errors_as_nan
):
    loss, model = problem
    cache = gflow.ProgramCache(tmp_path)
    ref = gflow.solve_flow(loss, model, t1=1.0, solver=TSIT5)
    for user_loss in (lambda m: loss(m), _UsersLoss(loss.chain)):
        out = gflow.solve_flow(
            user_loss, model, t1=1.0, solver=TSIT5, program_cache=cache
        )
        np.testing.assert_allclose(out.metrics["loss"], ref.metrics["loss"])
    assert cache.fallbacks == 2 and cache.writes == 0
    # a progress bar is a host callback: no export, the solve still runs
    out = gflow.solve_flow(
        loss, model, t1=1.0, solver=TSIT5, program_cache=cache, progress=True
    )
    np.testing.assert_allclose(out.metrics["loss"], ref.metrics["loss"])
    assert cache.fallbacks == 3 and cache.writes == 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # in CI's last step
def test_a_damaged_artifact_is_traced_again(problem, tmp_path, errors_as_nan):
    first = _solve(problem, gflow.ProgramCache(tmp_path))
    (artifact,) = tmp_path.iterdir()
    artifact.write_bytes(b"not a program")
    cache = gflow.ProgramCache(tmp_path)
    _same(first, _solve(problem, cache))
    assert (cache.hits, cache.writes) == (0, 1)


def test_describe_names_only_what_pins_a_program_down():
    assert describe(1e-6) == "1e-06" and describe(True) == "True"
    assert describe(gflow.solve_flow) == "gflow.dynamics.flow.solve_flow"
    assert describe(jnp.tanh) is not None
    assert describe(lambda x: x) is None

    def local(x):
        return x

    assert describe(local) is None
    local.__module__ = "gflow.dynamics.flow"  # a closure inside gflow: no name
    assert describe(local) is None
    assert describe(object()) is None  # known only by its address


@pytest.mark.slow  # 6 s (an export); call_interruptibly's own oracle is fast
def test_a_cache_with_an_interrupt_runs_the_same_program(
    problem, tmp_path, errors_as_nan
):
    """A cache given an interrupt (the ``gflow`` command's signal watch) runs each
    call in a worker thread that a signal abandons (``call_interruptibly``): not
    interrupted, it writes, reads and returns the solve bit for bit as a cache
    without one does."""
    watched = gflow.ProgramCache(tmp_path, interrupt=lambda: False)
    first = _solve(problem, watched)
    assert watched.writes == 1 and watched.fallbacks == 0
    second = _solve(problem, gflow.ProgramCache(tmp_path))  # the program it wrote
    _same(first, second)
    assert first.status == "success"


def _affine(a, b, n, scale):
    """A small program for the cache's own oracle: its result is known by hand."""
    return (a * n + b * scale, {"sum": jnp.sum(a)})


def _mapped(f, a):
    return (f(a),)


def test_the_cache_writes_reads_and_keys_a_small_program(tmp_path):
    """The default suite's oracle of ``ProgramCache`` (the solve tests above are
    slow): a miss writes one artifact and returns the function's values, a new
    cache on the folder reads it, a changed static value or shape is another key,
    an unkeyable argument (a lambda) runs through jit and writes nothing, and a
    damaged artifact is traced again."""
    a, b = jnp.arange(3.0), jnp.ones(3)
    want = (a * 2 + b * 0.5, jnp.sum(a))
    first = gflow.ProgramCache(tmp_path)
    out, extra = first(_affine, a, b, 2, 0.5)
    np.testing.assert_array_equal(out, want[0])
    np.testing.assert_array_equal(extra["sum"], want[1])
    assert (first.hits, first.writes, first.fallbacks) == (0, 1, 0)
    (artifact,) = tmp_path.iterdir()
    assert artifact.name.startswith("_affine-") and artifact.suffix == ".jaxexport"

    again = gflow.ProgramCache(tmp_path)
    out, _ = again(_affine, a, b, 2, 0.5)
    np.testing.assert_array_equal(out, want[0])
    assert (again.hits, again.writes) == (1, 0)
    again(_affine, a, b, 2, 0.5)  # the loaded program is kept by the instance
    assert again.hits == 1

    # another static value, another shape: other keys, other artifacts
    out, _ = again(_affine, a, b, 3, 0.5)
    np.testing.assert_array_equal(out, a * 3 + b * 0.5)
    out, _ = again(_affine, jnp.arange(4.0), jnp.ones(4), 2, 0.5)
    np.testing.assert_array_equal(out, jnp.arange(4.0) * 2 + 0.5)
    assert again.writes == 2 and len(list(tmp_path.iterdir())) == 3
    dyn, static = eqx.partition((a, b, 2, 0.5), eqx.is_array)
    leaves, treedef = jax.tree.flatten(dyn)
    k = again.key(_affine, static, treedef, leaves)
    assert len(k) == 32 and k != again.key(
        _affine, eqx.partition((a, b, 3, 0.5), eqx.is_array)[1], treedef, leaves
    )
    assert again.path("_affine", k) == artifact

    # a lambda among the static leaves cannot be keyed: jit, nothing written
    (out,) = again(_mapped, lambda x: 2 * x, a)
    np.testing.assert_array_equal(out, 2 * a)
    assert again.fallbacks == 1 and len(list(tmp_path.iterdir())) == 3
    (out,) = again(_mapped, jnp.tanh, a)  # a JAX function is known by its name
    np.testing.assert_allclose(out, jnp.tanh(a))
    assert again.fallbacks == 1 and len(list(tmp_path.iterdir())) == 4

    artifact.write_bytes(b"not a program")
    damaged = gflow.ProgramCache(tmp_path)
    out, _ = damaged(_affine, a, b, 2, 0.5)
    np.testing.assert_array_equal(out, want[0])
    assert (damaged.hits, damaged.writes) == (0, 1)
    assert artifact.read_bytes() != b"not a program"  # written again
