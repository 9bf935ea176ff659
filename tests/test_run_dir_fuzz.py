"""The command line against damaged and foreign run directories (issue 33 point 8).

Configurations: every command that resumes refuses each kind of bad config.json
(a config.json of the right command without settings among them) in one line with
exit 2, writes nothing there, and leaves every file byte-identical.

Checkpoint pieces: a tiny finished run of each command that checkpoints (flow
segments, sweep chunks, train segments, text runs) is made once, then one piece of
a copy (the second one read back) is damaged and the copy resumed (``--resume RUN
--quiet --no-figures``). What the code does, case by case (the same for all four
commands; text runs by default, flow, sweep and train in CI's slow steps):

- truncated to half, emptied, overwritten by random bytes, another piece copied
  over it: refused, exit 2, one stderr line naming the piece, why (cannot be read,
  is empty, is not an .npz archive, holds another piece) and the fix (delete it),
  no traceback; every file byte-identical, but for ``gflow.log``, the run's log,
  which may only have grown (a flow or a sweep logs the pieces read back before
  the damaged one);
- deleted: recomputed, exit 0, bit for bit the piece that was deleted; the run
  reads back (``load_run``) with the undamaged run's saved times, strictly
  increasing;
- a stray file, a folder holding a copy of a piece, and a copy of a piece under a
  name without an index (``segment-backup.npz``) beside the pieces: ignored, exit
  0, the run reads back with the undamaged run's times (``load_run`` of a sweep read
  the stray ``members-backup.npz`` as a chunk and failed with a TypeError before).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from gflow import load_run
from gflow.cli import main
from gflow.runs import ConfigError

#: the commands that take --resume RUN_DIR
RESUMING = ("flow", "sweep", "train", "text")

#: name -> the files of a bad run directory (None: the directory is not made)
DAMAGED = {
    "missing": None,
    "empty": {},
    "truncated config": {"config.json": '{"command": "flow", "con'},
    "config not an object": {"config.json": "[1, 2]"},
    "empty config file": {"config.json": ""},
    "binary config": {"config.json": "\x00\xff\xfe garbage"},
    "config a folder": {"config.json/": None},
    "no settings": {"config.json": '{"command": "<command>", "config": {}}'},
}


def _make(path, files, command):
    if files is None:
        return
    path.mkdir()
    for name, text in files.items():
        if name.endswith("/"):
            (path / name.rstrip("/")).mkdir()
        else:
            text = text.replace("<command>", command)
            (path / name).write_bytes(text.encode("utf-8", "surrogateescape"))


def _snapshot(path):
    if not path.exists():
        return None
    return {
        str(p.relative_to(path)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(path.rglob("*"))
    }


def _refused(argv, capsys):
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


@pytest.mark.parametrize("command", RESUMING)
@pytest.mark.parametrize("kind", list(DAMAGED))
def test_a_damaged_run_directory_is_refused_in_one_line(
    tmp_path, capsys, command, kind
):
    run = tmp_path / "run"
    _make(run, DAMAGED[kind], command)
    before = _snapshot(run)
    code, err = _refused([command, "--resume", str(run)], capsys)
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith(f"gflow {command}: error: --resume")
    assert "Traceback" not in err[0]
    if kind == "no settings":  # not the default run of the command
        assert f"{run / 'config.json'} has no settings" in err[0]
    assert _snapshot(run) == before  # nothing written, nothing changed


@pytest.mark.parametrize("command", RESUMING)
def test_another_commands_directory_is_refused_by_name(tmp_path, capsys, command):
    other = next(c for c in RESUMING if c != command)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"command": other, "config": {}}))
    before = _snapshot(run)
    code, err = _refused([command, "--resume", str(run)], capsys)
    assert code == 2, err
    assert len(err) == 1 and f"'gflow {other}' run" in err[0]
    assert _snapshot(run) == before


#: tiny runs of the commands that checkpoint, several pieces each (the settings of
#: tests/test_checkpoint_cli.py, smaller where that was cheaper)
TINY = {
    "flow": "flow --t1 3 --num-saves 4 --segments 3 --d-model 2 --pi 0.6,0.4 "
    "--solver tsit5",
    "sweep": "sweep --optimizer sgd --lrs 0.2,0.1 --t1 2 --num-saves 3 --chunk 1 "
    "--no-shard",
    "train": "train --steps 4 --num-saves 3 --segments 2 --seq-len 4 --batch 2 "
    "--eval-batch 4 --d-model 2 --layers 1 --heads 1",
    "text": "text --vocab-size 12 --context 4 --windows 16 --steps 6 --opt-steps 3 "
    "--num-saves 3 --num-queries 1 --sharpness-checks 0",
}

#: command -> (the piece damaged, another piece of the run), both in the run
#: directory; the damaged one is read back after the other one
PIECES = {
    "flow": ("checkpoint/segment-001.npz", "checkpoint/segment-002.npz"),
    "sweep": ("checkpoint/members-001.npz", "checkpoint/members-000.npz"),
    "train": ("checkpoint/segment-001.npz", "checkpoint/segment-000.npz"),
    "text": ("pieces/adam-000.npz", "pieces/gd-000.npz"),
}


def _stray(piece, other):
    (piece.parent / "notes.txt").write_text("kept beside the pieces\n")
    (piece.parent / "old").mkdir()
    shutil.copy(other, piece.parent / "old" / piece.name)
    prefix = piece.stem.rsplit("-", 1)[0]
    shutil.copy(other, piece.with_name(f"{prefix}-backup.npz"))


#: name -> (damage(piece, other piece), what the code does: the reason that the
#: one-line refusal gives, or None where the run resumes and ends with exit 0)
PIECE_DAMAGE = {
    "truncated to half": (
        lambda p, o: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
        "cannot be read (BadZipFile",
    ),
    "emptied": (lambda p, o: p.write_bytes(b""), "is empty"),
    "random bytes": (
        lambda p, o: p.write_bytes(np.random.default_rng(0).bytes(p.stat().st_size)),
        "is not an .npz archive",
    ),
    "another piece copied over it": (
        lambda p, o: shutil.copy(o, p),
        "a piece copied or renamed over another",
    ),
    "deleted": (lambda p, o: p.unlink(), None),
    "stray file and folder": (_stray, None),
}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """``finished(command)``: a finished tiny run directory of ``command``, made
    once (when first asked for); copy it before damaging it."""
    made = {}

    def get(command):
        if command not in made:
            tmp = tmp_path_factory.mktemp(command)
            argv = ["--quiet", *TINY[command].split(), "--no-figures"]
            if command == "text":
                words = ["the", "cat", "dog", "sat", "ran", "on", "mat", "big", "a"]
                rng = np.random.default_rng(0)
                corpus = tmp / "story.txt"
                corpus.write_text(
                    " ".join(" ".join(rng.choice(words, 6)) + "." for _ in range(400))
                )
                argv += ["--corpus", str(corpus)]
            assert main([*argv, "--out", str(tmp / "run")]) == 0
            made[command] = tmp / "run"
        return made[command]

    return get


def _times(run) -> dict[str, np.ndarray]:
    """name -> the saved times of each trajectory of ``run`` (a sweep's: of each
    member), read back with ``load_run``."""
    loaded = load_run(run)
    times = {name: np.asarray(tr.t) for name, tr in loaded.trajectories.items()}
    if loaded.command == "sweep":
        times.update(enumerate(np.asarray(loaded["members"].t)))
    return times


def _piece(path) -> dict:
    """A piece's arrays, less its checksum and the wall-clock times in a text
    run's stats (all that a recomputed piece does not repeat bit for bit)."""
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files if k != "piece:checksum"}
    if "stats" in arrays:
        stats = json.loads(str(arrays.pop("stats")))
        arrays.update({k: v for k, v in stats.items() if not k.endswith("_s")})
    return arrays


#: every command in CI's slow steps (.ci/run), which keeps the default run within 3
#: minutes; the default suite refuses damaged pieces through the piece store itself
#: (tests/test_checkpoint.py: truncated, empty, random, copied, per command's store)
SAMPLED = [
    pytest.param("flow", marks=pytest.mark.slow),
    pytest.param("sweep", marks=pytest.mark.slow),
    pytest.param("train", marks=pytest.mark.slow),
    pytest.param("text", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("kind", list(PIECE_DAMAGE))
@pytest.mark.parametrize("command", SAMPLED)
def test_a_damaged_checkpoint_piece_is_refused_or_recomputed(
    finished, tmp_path, capsys, command, kind
):
    undamaged = finished(command)
    run = tmp_path / "run"
    shutil.copytree(undamaged, run)
    piece, other = (run / name for name in PIECES[command])
    damage, reason = PIECE_DAMAGE[kind]
    damage(piece, other)
    before = _snapshot(run)
    capsys.readouterr()  # what making the run printed
    code = main(["--quiet", command, "--resume", str(run), "--no-figures"])
    err = capsys.readouterr().err.strip().splitlines()
    if reason is not None:
        assert code == 2, err
        assert len(err) == 1 and err[0].startswith(f"gflow {command}: error: "), err
        assert f"checkpoint piece {piece} " in err[0] and reason in err[0], err
        assert "delete that file" in err[0] and "Traceback" not in err[0]
        after = _snapshot(run)
        log = "gflow.log"
        assert after.pop(log).startswith(before.pop(log))  # the log only grows
        assert after == before  # every other file byte-identical
    else:
        assert code == 0, err
        assert not any("Traceback" in line for line in err), err
        if kind == "deleted":  # recomputed, bit for bit
            original = _piece(undamaged / PIECES[command][0])
            recomputed = _piece(piece)
            assert recomputed.keys() == original.keys()
            for name in original:
                np.testing.assert_array_equal(recomputed[name], original[name], name)
        times, want = _times(run), _times(undamaged)
        assert times.keys() == want.keys() and times
        for name, t in times.items():
            assert np.all(np.diff(t) > 0), name
            np.testing.assert_array_equal(t, want[name], err_msg=str(name))


@pytest.mark.slow  # a sweep run (CI's slow steps)
def test_load_run_reads_a_sweeps_chunks_by_the_index_in_their_names(finished, tmp_path):
    """Regression: ``load_run`` of a sweep counted the files named ``members-*.npz``
    and read chunks 0 .. count − 1: a stray ``members-backup.npz`` or a missing
    chunk (a sweep interrupted over several processes) ended in a TypeError. Now a
    chunk is read by its index, a gap is skipped, and a copy past the last chunk is
    refused in one line as a misplaced piece."""
    run = tmp_path / "run"
    shutil.copytree(finished("sweep"), run)
    checkpoint = run / "checkpoint"
    (checkpoint / "members-000.npz").unlink()
    assert load_run(run)["members"].lrs.tolist() == [0.1]  # chunk 1 alone
    shutil.copy(checkpoint / "members-001.npz", checkpoint / "members-009.npz")
    with pytest.raises(ConfigError, match="members-009.npz holds piece 1 of"):
        load_run(run)
