"""``--resume`` on run directories whose checkpoint pieces are damaged (issue 33
points 4 and 8).

``gflow flow --resume`` and ``gflow sweep --resume`` on a damaged piece end with exit
status 2 and one line on stderr that names the piece, never a ``BadZipFile`` or
``EOFError`` traceback, and never a run that succeeds with its times going back (a
segment copied over another). The fuzzer damages a finished flow run's segments in
random ways: the resumed run either refuses in one line or continues to the result
of the undamaged run, bit for bit (a deleted segment is recomputed).
"""

import contextlib
import io
import shutil
import tempfile
from pathlib import Path

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gflow import load_run
from gflow.cli import main

# tiny runs: the refusals come before any compilation, the runs compile once
FLOW = (
    "flow --t1 4 --num-saves 7 --segments 3 --d-model 2 --pi 0.6,0.4 --solver tsit5 "
    "--no-figures"
).split()
SWEEP = (
    "sweep --optimizer sgd --lrs 0.2,0.1 --t1 2 --num-saves 3 --chunk 1 --no-shard "
    "--no-figures"
).split()


@pytest.fixture(scope="module")
def flow_run(tmp_path_factory):
    """A finished tiny flow run directory (three segments)."""
    out = tmp_path_factory.mktemp("flow") / "run"
    assert main(["--quiet", *FLOW, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    """A sweep run directory whose two chunks are saved, interrupted (as by a
    SIGTERM) before its members were compared with the reference flow: the compare
    is most of the cost of a sweep, and none of this test."""
    out = tmp_path_factory.mktemp("sweep") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            "gflow.runs.resumable_sweep.concatenate",
            lambda *a: (_ for _ in ()).throw(KeyboardInterrupt),
        )
        assert main(["--quiet", *SWEEP, "--out", str(out)]) == 130
    assert (out / "checkpoint" / "members-001.npz").exists()
    return out


DAMAGE = {
    "truncated": lambda p, other: p.write_bytes(p.read_bytes()[:100]),
    "empty": lambda p, other: p.write_bytes(b""),
    "garbage": lambda p, other: p.write_bytes(b"\x00garbage" * 30),
    "copied over": lambda p, other: shutil.copy(other, p),
}


def _resume(command, run) -> tuple[int, list[str]]:
    """``gflow COMMAND --resume RUN``: (exit status, stderr lines)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["--quiet", command, "--resume", str(run)])
    return rc, err.getvalue().strip().splitlines()


def _refused_naming(rc, err, command, *paths):
    assert rc == 2, err
    assert len(err) == 1, err
    assert err[0].startswith(f"gflow {command}: error:"), err
    assert any(str(p) in err[0] for p in paths), err
    assert "delete that file" in err[0] and "Traceback" not in err[0]


# in CI's slow steps (.ci/run): keeps the default suite near 3 min;
# tests/test_checkpoint.py checks the pieces in the default run
@pytest.mark.slow
@pytest.mark.parametrize("kind", DAMAGE)
@pytest.mark.parametrize(
    "command, piece, other",
    [
        ("flow", "segment-001.npz", "segment-002.npz"),
        ("sweep", "members-000.npz", "members-001.npz"),
    ],
)
def test_resume_on_a_damaged_piece_is_one_line_exit_2(
    flow_run, sweep_run, tmp_path, command, piece, other, kind
):
    run = tmp_path / "run"
    shutil.copytree({"flow": flow_run, "sweep": sweep_run}[command], run)
    path = run / "checkpoint" / piece
    DAMAGE[kind](path, run / "checkpoint" / other)
    rc, err = _resume(command, run)
    _refused_naming(rc, err, command, path)


TRAIN = (
    "train --steps 8 --num-saves 5 --segments 2 --seq-len 6 --batch 4 --eval-batch 8 "
    "--d-model 4 --layers 1 --heads 1 --no-figures"
).split()
TEXT = (
    "text --vocab-size 12 --context 4 --windows 16 --steps 6 --opt-steps 3 "
    "--num-saves 3 --num-queries 1 --sharpness-checks 2 --no-figures"
).split()


@pytest.fixture(scope="module")
def train_run(tmp_path_factory):
    """A finished tiny training run directory (two segments)."""
    out = tmp_path_factory.mktemp("train") / "run"
    assert main(["--quiet", *TRAIN, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
    """A finished tiny text run directory (a GD run and an Adam run)."""
    tmp = tmp_path_factory.mktemp("text")
    rng = np.random.default_rng(0)
    words = ["the", "cat", "dog", "sat", "ran", "on", "mat", "big", "red", "a"]
    corpus = tmp / "story.txt"
    corpus.write_text(
        " ".join(" ".join(rng.choice(words, 6)) + "." for _ in range(400))
    )
    out = tmp / "run"
    assert main(["--quiet", *TEXT, "--corpus", str(corpus), "--out", str(out)]) == 0
    return out


@pytest.mark.slow  # two more commands' compilations; the same pieces as flow's
@pytest.mark.parametrize("kind", DAMAGE)
@pytest.mark.parametrize(
    "command, piece, other",
    [
        ("train", "checkpoint/segment-000.npz", "checkpoint/segment-001.npz"),
        ("text", "pieces/gd-000.npz", "pieces/adam-000.npz"),
    ],
)
def test_train_and_text_resume_on_a_damaged_piece_is_one_line_exit_2(
    request, tmp_path, command, piece, other, kind
):
    run = tmp_path / "run"
    shutil.copytree(request.getfixturevalue(f"{command}_run"), run)
    DAMAGE[kind](run / piece, run / other)
    rc, err = _resume(command, run)
    _refused_naming(rc, err, command, run / piece)


def _segment(run, k) -> Path:
    return run / "checkpoint" / f"segment-{k:03d}.npz"


def _damage(data: st.DataObject, run: Path) -> tuple[str, list[Path]]:
    """Damage ``run``'s segments as ``data`` draws: (kind, the files damaged)."""
    kind = data.draw(
        st.sampled_from(["truncate", "flip", "empty", "swap", "delete", "garbage"])
    )
    k = data.draw(st.integers(0, 2), label="segment")
    path = _segment(run, k)
    raw = path.read_bytes()
    if kind == "truncate":
        path.write_bytes(raw[: data.draw(st.integers(0, len(raw) - 1), label="at")])
    elif kind == "flip":
        at = data.draw(st.integers(0, len(raw) - 1), label="at")
        bit = data.draw(st.integers(0, 7), label="bit")
        path.write_bytes(raw[:at] + bytes([raw[at] ^ (1 << bit)]) + raw[at + 1 :])
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "swap":
        j = data.draw(st.sampled_from([j for j in range(3) if j != k]), label="with")
        other = _segment(run, j)
        path.write_bytes(other.read_bytes())
        other.write_bytes(raw)
        return kind, [path, other]
    elif kind == "delete":
        path.unlink()
    else:
        path.write_bytes(data.draw(st.binary(max_size=300), label="garbage"))
    return kind, [path]


@pytest.mark.slow  # in CI's slow steps (.ci/run): keeps the default suite near 3 min
@settings(max_examples=20, deadline=None, database=None)
@given(data=st.data())
def test_fuzzed_damage_resumes_correctly_or_is_refused_in_one_line(flow_run, data):
    """Every damage is refused in one line (exit 2) or, where nothing the run
    needs was lost (a deleted segment, a flipped bit the checksum does not cover),
    resumes to the undamaged run's times, metrics and final model, bit for bit."""
    undamaged = load_run(flow_run)["flow"]
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        shutil.copytree(flow_run, run)
        kind, damaged = _damage(data, run)
        rc, err = _resume("flow", run)
        if kind == "delete" or (kind == "flip" and rc == 0):
            assert rc == 0, err
            flow = load_run(run)["flow"]
            assert flow.status == "success" and np.all(np.diff(flow.t) > 0)
            np.testing.assert_array_equal(flow.t, undamaged.t)
            for name in undamaged.metrics:
                np.testing.assert_array_equal(
                    flow.metrics[name], undamaged.metrics[name], err_msg=name
                )
            for a, b in zip(
                jax.tree.leaves(flow.final), jax.tree.leaves(undamaged.final)
            ):
                np.testing.assert_array_equal(a, b)
        else:
            _refused_naming(rc, err, "flow", *damaged)
