"""Verified checkpoint pieces (issue 33 point 4): ``PieceStore``, ``run_pieces`` and
the resumable flow and sweep on damaged, swapped and legacy pieces.

Every kind of damage ends in a ``ConfigError`` of one line that names the piece's
file and the fix (delete it to recompute it), never a ``BadZipFile``, ``EOFError``
or ``KeyError``, and never a run that succeeds with its times out of order.
"""

import shutil

import diffrax
import jax
import numpy as np
import optax
import pytest

import gflow
from gflow.runs import ConfigError, PieceStore, fingerprint, run_pieces


def _raw(path) -> dict:
    """The arrays of a piece's file, the recorded fields included."""
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def _write_raw(path, arrays: dict) -> None:
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def _legacy(path) -> None:
    """Rewrite a piece as gflow wrote it before pieces recorded their index, time
    range and checksum: the fingerprint and the columns only."""
    arrays = _raw(path)
    _write_raw(path, {k: v for k, v in arrays.items() if not k.startswith("piece:")})


def _flip(path, where: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    data[int(where * (len(data) - 1))] ^= 0xFF
    path.write_bytes(bytes(data))


def _changed(path) -> None:
    """The arrays rewritten with one value changed, the old checksum kept."""
    arrays = _raw(path)
    arrays["x"] = arrays["x"] + 1
    _write_raw(path, arrays)


def _without(name):
    def damage(path):
        arrays = _raw(path)
        del arrays[name]
        _write_raw(path, arrays)

    return damage


# kind of damage -> (damage(path), words the refusal must hold)
DAMAGE = {
    "truncated": (
        lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
        "cannot be read",
    ),
    "empty": (lambda p: p.write_bytes(b""), "is empty"),
    "garbage": (lambda p: p.write_bytes(b"not a checkpoint\n" * 40), "not an .npz"),
    "flipped byte": (_flip, ""),
    "changed array": (_changed, "checksum"),
    "no fingerprint": (_without("fingerprint"), "no fingerprint"),
    "no checksum": (_without("piece:checksum"), "no checksum"),
}


def _refused(excinfo, path, words=""):
    """The refusal is one line naming ``path`` and the fix."""
    message = str(excinfo.value)
    assert "\n" not in message and str(path) in message, message
    assert "delete" in message and words in message, message


def _store(tmp_path) -> PieceStore:
    """Two pieces of a run in time: t in [0, 1], then (1, 2]."""
    store = PieceStore(tmp_path, "seg", "fp")
    store.save(0, {"t": np.linspace(0.0, 1.0, 3), "x": np.arange(6.0).reshape(3, 2)})
    store.save(1, {"t": np.linspace(1.5, 2.0, 2), "x": np.ones((2, 2), np.float32)})
    return store


def test_a_piece_records_its_index_time_range_and_checksum(tmp_path):
    store = _store(tmp_path)
    arrays = _raw(store.path(1))
    assert int(arrays["piece:index"]) == 1 and str(arrays["piece:name"]) == "seg-001"
    np.testing.assert_array_equal(arrays["piece:t"], [1.5, 2.0])
    assert len(str(arrays["piece:checksum"])) == 64
    # the range is first and last time, not the first two (piece 0 has three)
    np.testing.assert_array_equal(_raw(store.path(0))["piece:t"], [0.0, 1.0])
    # read back: the columns as saved, the recorded fields left out
    back = store.load(1)
    assert back.keys() == {"t", "x"} and back["x"].dtype == np.float32
    np.testing.assert_array_equal(back["t"], [1.5, 2.0])


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_damaged_piece_is_refused_in_one_line_naming_it(tmp_path, kind):
    store = _store(tmp_path)
    damage, words = DAMAGE[kind]
    damage(store.path(1))
    with pytest.raises(ConfigError) as excinfo:
        store.load(1)
    _refused(excinfo, store.path(1), words)
    # ... also by run_pieces, which never recomputes over it
    with pytest.raises(ConfigError) as excinfo:
        run_pieces(store, 2, lambda i, previous: pytest.fail("recomputed"))
    _refused(excinfo, store.path(1), words)


def test_a_piece_copied_over_another_is_refused(tmp_path):
    store = _store(tmp_path)
    shutil.copy(store.path(1), store.path(0))
    with pytest.raises(ConfigError) as excinfo:
        run_pieces(store, 2, lambda i, previous: pytest.fail("recomputed"))
    _refused(
        excinfo, store.path(0), "holds piece 1 of 'seg' (seg-001.npz), not seg-000"
    )


def test_a_piece_of_another_name_copied_over_is_refused(tmp_path):
    """A text run keeps one piece per run, each of index 0 (gd-000.npz,
    adam-000.npz): the recorded name tells them apart."""
    gd, adam = PieceStore(tmp_path, "gd", "fp"), PieceStore(tmp_path, "adam", "fp")
    gd.save(0, {"x": np.zeros(2)})
    adam.save(0, {"x": np.ones(2)})
    shutil.copy(adam.path(0), gd.path(0))
    with pytest.raises(ConfigError) as excinfo:
        gd.load(0)
    _refused(excinfo, gd.path(0), "holds piece 0 of 'adam' (adam-000.npz), not gd-000")


def test_pieces_whose_times_do_not_increase_are_refused(tmp_path):
    """Each piece sound on its own (index and checksum right), but piece 1 starts
    before piece 0 ends: the run's times would go back."""
    store = PieceStore(tmp_path, "seg", "fp")
    store.save(0, {"t": np.linspace(0.0, 1.0, 3)})
    store.save(1, {"t": np.linspace(0.5, 2.0, 3)})
    with pytest.raises(ConfigError) as excinfo:
        run_pieces(store, 2, lambda i, previous: pytest.fail("recomputed"))
    _refused(excinfo, store.path(1), "t = 0.5")


def test_a_legacy_piece_loads_unverified_and_a_missing_one_is_recomputed(tmp_path):
    store = _store(tmp_path)
    for i in (0, 1):
        _legacy(store.path(i))
    store.path(1).unlink()
    computed = {"t": np.asarray([1.5, 2.0]), "x": np.ones((2, 2))}
    pieces = run_pieces(store, 2, lambda i, previous: computed)
    np.testing.assert_array_equal(pieces[0]["t"], [0.0, 0.5, 1.0])
    assert pieces[0].keys() == {"t", "x"}
    assert int(_raw(store.path(1))["piece:index"]) == 1  # the new one is recorded


def test_fingerprints_are_those_of_earlier_runs():
    """The resume fingerprint is the same function of the same inputs as before
    pieces were verified: runs started then still resume (value from gflow at
    commit bce3ee9)."""
    fp = fingerprint(
        np.arange(3.0),
        {"w": np.ones((2, 2), np.float32)},
        settings={"t1": 3.0, "solver": "Tsit5()"},
    )
    assert fp == "91abeb04f291f5b0"


# --- through the resumable flow and sweep -------------------------------------------

# Tsit5: the refusals are about the pieces, not the solver, and it compiles in a
# fraction of the default's time (this setup took 10 s with the default)
FLOW = dict(
    t1=3.0,
    ts=np.linspace(0.0, 3.0, 7),
    segments=3,
    save_params=True,
    solver=diffrax.Tsit5(),
)


@pytest.fixture(scope="module")
def flow_setup(setup, tmp_path_factory):
    """(loss, model, a finished 3-segment flow run, its Trajectory)."""
    loss, model = setup
    directory = tmp_path_factory.mktemp("flow") / "ck"
    full = gflow.solve_flow_resumable(loss, model, checkpoint_dir=directory, **FLOW)
    assert full.status == "success" and full.info["resumed_from_segment"] == -1
    return loss, model, directory, full


def _flow_copy(flow_setup, tmp_path):
    loss, model, directory, full = flow_setup
    shutil.copytree(directory, tmp_path / "ck")
    return tmp_path / "ck"


def _segment(directory, k):
    return directory / f"segment-{k:03d}.npz"


@pytest.mark.parametrize("kind", ["truncated", "empty", "garbage", "flipped byte"])
def test_resumable_flow_refuses_a_damaged_segment(flow_setup, tmp_path, kind):
    loss, model, _, _ = flow_setup
    directory = _flow_copy(flow_setup, tmp_path)
    damage, words = DAMAGE[kind]
    damage(_segment(directory, 1))
    with pytest.raises(ConfigError) as excinfo:
        gflow.solve_flow_resumable(loss, model, checkpoint_dir=directory, **FLOW)
    _refused(excinfo, _segment(directory, 1), words)


@pytest.mark.parametrize("swap", [False, True])
def test_resumable_flow_refuses_a_segment_copied_over_another(
    flow_setup, tmp_path, swap
):
    """The issue's case: segment 2 copied over segment 1 was read back, and the run
    reported success with its times going 1 -> 2.5 and rows repeated."""
    loss, model, _, _ = flow_setup
    directory = _flow_copy(flow_setup, tmp_path)
    one, two = _segment(directory, 1), _segment(directory, 2)
    if swap:
        one.rename(tmp_path / "one")
        two.rename(one)
        (tmp_path / "one").rename(two)
    else:
        shutil.copy(two, one)
    with pytest.raises(ConfigError) as excinfo:
        gflow.solve_flow_resumable(loss, model, checkpoint_dir=directory, **FLOW)
    _refused(
        excinfo, one, "holds piece 2 of 'segment' (segment-002.npz), not segment-001"
    )


def test_resumable_flow_refuses_legacy_segments_out_of_order(flow_setup, tmp_path):
    """Pieces written before they recorded their index are not verified, but their
    times still have to increase."""
    loss, model, _, _ = flow_setup
    directory = _flow_copy(flow_setup, tmp_path)
    for k in range(3):
        _legacy(_segment(directory, k))
    shutil.copy(_segment(directory, 2), _segment(directory, 1))
    with pytest.raises(ConfigError) as excinfo:
        gflow.solve_flow_resumable(loss, model, checkpoint_dir=directory, **FLOW)
    _refused(excinfo, _segment(directory, 1), "t = 2.5")


def test_resumable_flow_resumes_legacy_and_recomputes_deleted_segments(
    flow_setup, tmp_path
):
    """Segments of gflow before this change resume with the same fingerprint; a
    deleted segment is recomputed; the result is bit for bit the undamaged one."""
    loss, model, _, full = flow_setup
    directory = _flow_copy(flow_setup, tmp_path)
    for k in range(3):
        _legacy(_segment(directory, k))
    _segment(directory, 1).unlink()
    again = gflow.solve_flow_resumable(loss, model, checkpoint_dir=directory, **FLOW)
    assert again.status == "success"
    np.testing.assert_array_equal(again.t, full.t)
    for k in full.metrics:
        np.testing.assert_array_equal(again.metrics[k], full.metrics[k], err_msg=k)
    for a, b in zip(jax.tree.leaves(again.final), jax.tree.leaves(full.final)):
        np.testing.assert_array_equal(a, b)
    assert int(_raw(_segment(directory, 1))["piece:index"]) == 1
    assert "piece:index" not in _raw(_segment(directory, 2))  # read back as it was


SWEEP = dict(t1=1.0, num_saves=3, fingerprint="cfg", chunk=1)
LRS = [0.2, 0.1]


@pytest.fixture(scope="module")
def sweep_setup(setup, tmp_path_factory):
    loss, model = setup
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
    directory = tmp_path_factory.mktemp("sweep") / "ck"
    gflow.run_sweep_resumable(loss, model, opt, LRS, checkpoint_dir=directory, **SWEEP)
    return loss, model, opt, directory


def _chunk(directory, i):
    return directory / f"members-{i:03d}.npz"


@pytest.mark.parametrize("kind", ["truncated", "empty", "flipped byte", "copied"])
def test_resumable_sweep_refuses_a_damaged_chunk(sweep_setup, tmp_path, kind):
    loss, model, opt, directory = sweep_setup
    shutil.copytree(directory, tmp_path / "ck")
    directory = tmp_path / "ck"
    if kind == "copied":
        shutil.copy(_chunk(directory, 0), _chunk(directory, 1))
        words = "holds piece 0 of 'members' (members-000.npz), not members-001"
    else:
        damage, words = DAMAGE[kind]
        damage(_chunk(directory, 1))
    with pytest.raises(ConfigError) as excinfo:
        gflow.run_sweep_resumable(
            loss, model, opt, LRS, checkpoint_dir=directory, **SWEEP
        )
    _refused(excinfo, _chunk(directory, 1), words)
