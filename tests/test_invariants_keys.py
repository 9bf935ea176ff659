"""Keys and streams (issue 58, point 1): each key moves with every input it claims
to depend on, and a run cut into pieces draws what the uncut run draws.

- ``ProgramCache.key`` names the function, the arguments' structure and static
  values, the arrays' shapes and dtypes, the library versions, the 64-bit flag,
  ``EQX_ON_ERROR`` and a digest of gflow's source (its module docstring): each
  one changed alone changes the key, and ``source_digest`` reads the content of
  every source file (checked on a copy of the package).
- A minibatch run cut into pieces (``minibatch_segment`` with ``start``, ``t0`` and
  the optimizer state) draws the uncut run's batches, takes its steps, keeps its
  clock and records its divergence at the same step.
- A checkpoint's ``fingerprint`` changes with any element of any array and any
  setting; a piece's ``checksum`` with a column's name as well as its bytes.

No model here: the minibatch runs descend a three-parameter quadratic on integer
batches, so each compiled program is tiny.
"""

import importlib.util
import inspect
import shutil
import sys
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gflow
from gflow.dynamics import minibatch_segment, run_minibatch
from gflow.runs import ConfigError, PieceStore, ProgramCache, fingerprint, run_pieces

#: the key's module, to stand in for its versions and source digest
program_cache_module = sys.modules[ProgramCache.__module__]

# ------------------------------------------------------------- the program key


def _key_of(fn=gflow.solve_flow, static=(1e-3, 7, "tsit5"), arrays=None):
    arrays = [np.zeros((2, 3)), np.zeros(4)] if arrays is None else arrays
    leaves, treedef = jax.tree.flatten(arrays)
    return ProgramCache("unused").key(fn, static, treedef, leaves)


def test_the_program_key_moves_with_each_input_it_names(monkeypatch):
    """Each named input changed alone gives another key; the same inputs the same.

    Catches a key that leaves out the dtypes (a float32 program served to float64
    arrays), the static values (a solver's settings), the 64-bit flag, the
    environment's EQX_ON_ERROR, the versions or the source digest."""
    # the gflow command sets EQX_ON_ERROR for its process (and in-process CLI
    # tests with it): the base key reads a value of its own
    monkeypatch.setenv("EQX_ON_ERROR", "raise")
    base = _key_of()
    assert base is not None and _key_of() == base
    changed = {
        "function": _key_of(fn=gflow.run_optimizer),
        "static value": _key_of(static=(2e-3, 7, "tsit5")),
        "static type": _key_of(static=(1e-3, 7.0, "tsit5")),
        "dtype": _key_of(arrays=[np.zeros((2, 3), np.float32), np.zeros(4)]),
        "shape": _key_of(arrays=[np.zeros((3, 2)), np.zeros(4)]),
        "structure": _key_of(arrays=([np.zeros((2, 3)), np.zeros(4)],)),
    }
    with monkeypatch.context() as m:
        m.setenv("EQX_ON_ERROR", "nan")
        changed["EQX_ON_ERROR"] = _key_of()
    with monkeypatch.context() as m:
        m.setattr(program_cache_module, "_versions", lambda: "jax=0.0")
        changed["versions"] = _key_of()
    with monkeypatch.context() as m:
        m.setattr(program_cache_module, "source_digest", lambda: "0" * 64)
        changed["source"] = _key_of()
    jax.config.update("jax_enable_x64", False)  # the autouse fixture restores it
    try:
        changed["x64"] = _key_of()
    finally:
        jax.config.update("jax_enable_x64", True)
    assert _key_of() == base  # nothing above leaked
    same = {what for what, key in changed.items() if key == base}
    assert not same, f"the key ignores: {sorted(same)}"
    assert len(set(changed.values())) == len(changed)


def test_the_source_digest_reads_every_byte_of_gflow(tmp_path):
    """``source_digest`` of a copy of gflow's source: the same copy gives the same
    digest, and an edit that keeps every file's size, a new file or a renamed one
    each give another.

    Catches a digest of file sizes or modification times instead of contents (an
    edit of equal length would reuse stale programs) and one of names only."""
    root = Path(inspect.getfile(ProgramCache)).resolve().parents[1]
    copy = tmp_path / "gflow"
    for path in root.rglob("*.py"):
        (copy / path.relative_to(root)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy / path.relative_to(root))

    def digest():
        spec = importlib.util.spec_from_file_location(
            "_program_cache_copy", copy / "runs" / "program_cache.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.source_digest()

    first = digest()
    assert digest() == first
    target = copy / "dynamics" / "flow.py"
    text = target.read_bytes()
    i = text.index(b"t0")
    target.write_bytes(text[:i] + b"t1" + text[i + 2 :])  # same size, new content
    edited = digest()
    target.write_bytes(text)
    assert digest() == first
    (copy / "extra.py").write_text("")
    added = digest()
    (copy / "extra.py").rename(copy / "other.py")
    renamed = digest()
    assert len({first, edited, added, renamed}) == 4


# ------------------------------------------------------- minibatch pieces


def _stream(key):
    return jax.random.randint(key, (4,), 0, 5)


def _batch_loss(params, batch):
    return 0.5 * jnp.sum((params["w"] - batch[:3]) ** 2) + 0.1 * batch[3]


def _held(params):
    return 0.5 * jnp.sum((params["w"] - 2.0) ** 2)


def _schedule(k):
    """0.1, 0.2, ... for five steps, then a step size that blows the run up."""
    return jnp.where(k < 5, 0.1 * (k + 1), 1e12)


def test_pieces_of_a_minibatch_run_are_the_uncut_run():
    """Three pieces of two steps (each from the last one's step, clock and
    optimizer state) against one run of 5 steps rounded up to 6: the same batch
    keys, steps, parameters, clock and divergence step (step 5, in the last piece).

    Catches batch keys folded in with the piece's own index (a resumed run redraws
    the first batches), a schedule read from step 0 in every piece, a piece's clock
    that ignores t0, a divergence step recorded without the piece's start, and a
    run whose steps are rounded down instead of up to a multiple of save_every."""
    key = jax.random.key(11)
    params = {"w": jnp.zeros(3)}
    opt = optax.sgd(_schedule)
    common = dict(batch_loss=_batch_loss, learning_rate=_schedule, key=key)
    uncut = run_minibatch(
        _held, params, opt, _stream, steps=5, save_every=2, save_params=True, **common
    )
    assert uncut.stats["steps"] == 6 and len(uncut.t) == 4
    model, state, t0, pieces = params, None, 0.0, []
    for start in (0, 2, 4):
        piece, state = minibatch_segment(
            _held,
            model,
            opt,
            _stream,
            steps=2,
            save_every=2,
            start=start,
            t0=t0,
            opt_state=state,
            save_params=True,
            **common,
        )
        model, t0 = piece.final, piece.t[-1]
        pieces.append(piece)
    cut_t = np.concatenate([pieces[0].t] + [p.t[1:] for p in pieces[1:]])
    np.testing.assert_allclose(cut_t, uncut.t, rtol=1e-12)
    np.testing.assert_allclose(uncut.t, [0.0, 0.3, 1.0, 1.0 + 0.5 + 1e12], rtol=1e-12)
    loss = np.concatenate(
        [pieces[0].metrics["loss"]] + [p.metrics["loss"][1:] for p in pieces[1:]]
    )
    np.testing.assert_array_equal(loss, uncut.metrics["loss"])  # NaN after step 5
    w = np.concatenate(
        [pieces[0].params["w"]] + [p.params["w"][1:] for p in pieces[1:]]
    )
    np.testing.assert_array_equal(w, uncut.params["w"])
    np.testing.assert_array_equal(pieces[-1].final["w"], uncut.final["w"])
    assert uncut.stats["diverged_step"] == pieces[-1].stats["diverged_step"] == 5
    assert pieces[1].status == "success" and np.isfinite(loss[:3]).all()


# ---------------------------------------------------------- checkpoints


def test_a_fingerprint_moves_with_every_array_element_and_setting():
    """Changing any one element of any array of the model, or any setting's value,
    gives another fingerprint; an equal copy gives the same.

    Catches a fingerprint of the arrays' shapes (or dtypes) only, one that skips a
    leaf, and one keyed on the settings' names rather than their values."""
    model = gflow.AttentionModel.init(
        d_vocab=3, d_model=2, init_scale=0.3, key=jax.random.key(0)
    )
    settings = {"lr": 0.1, "steps": 10, "solver": "tsit5"}
    base = fingerprint(model, settings=settings)
    assert fingerprint(jax.tree.map(jnp.copy, model), settings=dict(settings)) == base
    arrays, static = eqx.partition(model, eqx.is_array)
    leaves, treedef = jax.tree.flatten(arrays)
    leaves = [np.asarray(leaf) for leaf in leaves]
    seen = {base}
    for i, leaf in enumerate(leaves):
        for j in range(leaf.size):
            bumped = leaf.copy()
            bumped.flat[j] = np.nextafter(bumped.flat[j], np.inf)  # one ulp
            new = jax.tree.unflatten(treedef, leaves[:i] + [bumped] + leaves[i + 1 :])
            seen.add(fingerprint(eqx.combine(new, static), settings=settings))
    n = sum(leaf.size for leaf in leaves)
    assert len(seen) == n + 1  # every element, each its own fingerprint
    for name, value in (("lr", 0.2), ("steps", 11), ("solver", "dopri5")):
        assert fingerprint(model, settings={**settings, name: value}) != base, name


def test_a_piece_with_a_column_swapped_or_renamed_fails_its_checksum(tmp_path):
    """A saved piece read back as written; the same piece with two columns of one
    shape swapped, or with one column renamed (its recorded checksum kept each
    time), is refused.

    Catches a checksum of the dtypes, shapes and bytes without the columns' names
    (a renamed column passes it)."""
    store = PieceStore(tmp_path, "piece", "fp")
    columns = {"t": np.arange(1.0, 5.0), "loss": np.arange(4.0) / 10}
    store.save(0, columns)
    back = store.load(0)
    for name, value in columns.items():
        np.testing.assert_array_equal(back[name], value)
    with np.load(store.path(0)) as data:
        saved = {k: data[k] for k in data.files}
    swapped = dict(saved, t=saved["loss"], loss=saved["t"])
    renamed = {("losses" if k == "loss" else k): v for k, v in saved.items()}
    for arrays in (swapped, renamed):
        np.savez(store.path(0), **arrays)
        with pytest.raises(ConfigError, match="fails its checksum"):
            store.load(0)


@pytest.fixture(autouse=True)
def _no_leaked_flags():
    yield
    assert jax.config.jax_enable_x64


def _pieces(tmp_path, times, *, statuses=None, expect=None, window=None):
    """``run_pieces`` over pieces whose t columns are ``times``; the pieces run."""
    store = PieceStore(tmp_path, "seg", "fp")
    ran = []

    def compute(i, previous):
        ran.append(i)
        columns = {"t": np.asarray(times[i], float), "eta": np.full(2, 0.1 * (i + 1))}
        if statuses is not None:
            columns["status"] = np.asarray(statuses[i])
        return columns

    out = run_pieces(store, len(times), compute, expect=expect, window=window)
    return store, out, ran


def test_resumed_pieces_are_checked_against_their_run(tmp_path):
    """A run cut into pieces resumes only from pieces that belong to it: each
    piece must start after the one before ends (a piece starting at that very
    time is refused), lie in its window at both ends, and hold the arrays the run
    expects by value; a piece that ends the run (diverged) is saved like the
    others, so a resumed run reads it instead of running it again.

    Catches a time order that accepts a piece starting where the last one ended
    (> read as >=), a window checked at the piece's first time only, expected
    arrays checked by name only, and a diverged last piece left unsaved."""
    windows = {0: (0.0, 1.0), 1: (1.0, 2.0)}
    store, out, ran = _pieces(tmp_path / "a", [[0.0, 1.0], [1.5, 2.0]])
    assert ran == [0, 1] and len(out) == 2
    _, out, ran = _pieces(tmp_path / "a", [[0.0, 1.0], [1.5, 2.0]], window=windows.get)
    assert ran == [] and len(out) == 2  # read back, not run
    # a piece written over piece 1 that starts where piece 0 ends
    store.save(1, {"t": np.array([1.0, 2.0]), "eta": np.full(2, 0.2)})
    with pytest.raises(ConfigError, match="breaks the run's time order"):
        _pieces(tmp_path / "a", [[0.0, 1.0], [1.5, 2.0]])
    # ... and one that starts in its window but ends past it
    store.save(1, {"t": np.array([1.5, 2.5]), "eta": np.full(2, 0.2)})
    with pytest.raises(ConfigError, match="outside piece 1's"):
        _pieces(tmp_path / "a", [[0.0, 1.0], [1.5, 2.0]], window=windows.get)
    # expected arrays are compared by value
    store.save(1, {"t": np.array([1.5, 2.0]), "eta": np.full(2, 0.2)})
    with pytest.raises(ConfigError, match="different configuration"):
        _pieces(
            tmp_path / "a",
            [[0.0, 1.0], [1.5, 2.0]],
            expect=lambda i: {"eta": np.full(2, 0.1 * (i + 1) + (i == 1))},
        )
    # a diverged piece ends the run and is saved: the rerun reads it
    times, statuses = [[0.0, 1.0], [1.5, 2.0], [2.5, 3.0]], ["success", "diverged"]
    _, out, ran = _pieces(tmp_path / "b", times, statuses=statuses + ["success"])
    assert ran == [0, 1] and len(out) == 2
    _, out, ran = _pieces(tmp_path / "b", times, statuses=statuses + ["success"])
    assert ran == [] and str(out[-1]["status"]) == "diverged"
