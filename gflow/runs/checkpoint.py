"""One checkpoint/resume driver for long runs cut into pieces (flow segments, sweep
chunks, training segments, text runs).

A long run is cut into pieces computed in order. Each finished piece is written at
once, atomically, as ``<prefix>-<i>.npz`` holding its arrays and the run's
*fingerprint*: a hash of everything that determines the result. Called again on the
same directory, the driver reads back the pieces found there (refusing any with
another fingerprint) and computes only the rest, so an interrupted run loses at most
the piece it was in; every piece is the same compiled program, so a resumed run is
bit-identical to one that never stopped.

A piece whose ``status`` is not ``success`` (a flow segment that hit NaN, say) is
written too, partial trajectory included, and ends the run: resuming returns it as it
was instead of recomputing a failure.

Verified pieces. Beside its columns a piece records

- ``piece:name`` and ``piece:index``: its file name's stem ``<prefix>-<i>`` and its
  index i, which must be those of the file it is read from (a piece copied or renamed
  over another, a text run's piece over another run's among them, is refused);
- ``piece:t``: its time range [t_first, t_last], when its columns have a
  one-dimensional, non-empty ``t`` column (a flow or training segment; a sweep chunk's
  ``t`` is per member, [M, S], and its chunks lie side by side, not one after another);
- ``piece:checksum``: the SHA-256 of every other array in the file, name, dtype,
  shape and bytes, so that any change after the write is seen.

``PieceStore.load`` refuses, as a one-line ``ConfigError`` naming the file, a piece
that cannot be read (empty, truncated, not an .npz archive), that lacks its
fingerprint or its checksum, whose checksum does not match, or whose recorded name
or index is another file's; ``run_pieces`` refuses a piece read back whose times leave
its part of the run where the run knows it (a flow segment's [t_k, t_k+1]), and pieces
whose times do not increase strictly from one piece to the next (t_first of piece i >
t_last of piece i−1), naming the piece read back. A damaged piece is
refused, not recomputed over: the fix is one ``rm`` away and named in the message,
while deleting it silently would destroy what may be the only evidence of a disk or
copy fault (or a file being written by another process on a shared filesystem).
Deleting the piece recomputes it, bit-identical, from the piece before it.

Pieces written before pieces were verified hold no ``piece:`` fields: they are read
back as before, unverified except for their fingerprint and the order of their times;
a piece that holds any of the fields is verified in full.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
from collections.abc import Callable
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

from gflow.runs.config import AbstractConfig, ConfigError
from gflow.runs.files import atomic_write_bytes

log = logging.getLogger(__name__)

#: The column that holds a piece's status (absent: ``success``).
STATUS = "status"

_FINGERPRINT = "fingerprint"
_RECORDED = "piece:"  # the prefix of the fields a piece records about itself
_NAME, _INDEX = "piece:name", "piece:index"
_TIMES, _CHECKSUM = "piece:t", "piece:checksum"


def fingerprint(*trees, settings=None) -> str:
    """A hash of the array leaves and tree structures of ``trees`` and ``settings``.

    Two runs with equal fingerprints compute the same thing: their models, losses
    and observables hold equal arrays (bit for bit) in the same structure, and the
    remaining ``settings`` (JSON-able, or compared by ``repr``) are equal.
    """
    h = hashlib.sha256()
    for tree in trees:
        arrays, static = eqx.partition(tree, eqx.is_array)
        for x in jax.tree.leaves(arrays):
            x = np.asarray(x)
            h.update(f"{x.dtype}{x.shape}".encode())
            h.update(np.ascontiguousarray(x).tobytes())
        h.update(str(jax.tree.structure(arrays)).encode())
        h.update(repr(static).encode())
    h.update(json.dumps(settings, sort_keys=True, default=repr).encode())
    return h.hexdigest()[:16]


def config_fingerprint(cfg: AbstractConfig, *trees, **extra) -> str:
    """``fingerprint`` of ``trees`` and of the settings of ``cfg`` that change the
    results, less those at their ``hashed_defaults`` (the settings that runs saved
    earlier were hashed without), with ``extra`` (what else the pieces depend on)."""
    old = cfg.hashed_defaults
    settings = {
        k: v
        for k, v in dataclasses.asdict(cfg).items()
        if k not in cfg.not_results and (k not in old or v != old[k])
    }
    return fingerprint(*trees, settings={**settings, **extra})


def checksum(arrays: dict[str, np.ndarray]) -> str:
    """The SHA-256 (hex) of ``arrays``: each name, dtype, shape and bytes, by name."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        x = np.ascontiguousarray(arrays[name])
        h.update(f"{name}\0{x.dtype.str}{x.shape}\0".encode())
        h.update(x.tobytes())
    return h.hexdigest()


def time_range(columns: dict) -> tuple[float, float] | None:
    """(first, last) of a piece's one-dimensional ``t`` column; None without one."""
    t = columns.get("t")
    if t is None or np.ndim(t) != 1 or not len(t):
        return None
    return float(t[0]), float(t[-1])


def _index_in_name(path: Path) -> int:
    return int(path.stem.rsplit("-", 1)[1])


def _read(path: Path) -> dict[str, np.ndarray]:
    """All arrays of the .npz at ``path``; ConfigError if it cannot be read."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise ConfigError(f"checkpoint piece {path} cannot be read: {e}") from e
    if not head:
        raise _damaged(path, "is empty (a write that never finished?)")
    if head != b"PK\x03\x04":  # numpy would try other formats, pickles among them
        raise _damaged(path, "is not an .npz archive (it does not start as one)")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except Exception as e:  # BadZipFile, a bad CRC, a broken .npy header, ...
        raise _damaged(path, f"cannot be read ({type(e).__name__}: {e})") from e


def _damaged(path: Path, what: str) -> ConfigError:
    what = " ".join(what.split())[:200]
    return ConfigError(
        f"checkpoint piece {path} {what}; delete that file to recompute it (the "
        "other pieces are kept)"
    )


class PieceStore:
    """The finished pieces of one run, in ``directory`` as ``<prefix>-<i>.npz``."""

    def __init__(self, directory, prefix: str, fingerprint: str | None):
        """``fingerprint=None`` reads any piece (a finished run read back)."""
        self.directory = Path(directory)
        self.prefix = prefix
        self.fingerprint = fingerprint

    def path(self, i: int) -> Path:
        return self.directory / f"{self.prefix}-{i:03d}.npz"

    def paths(self) -> list[Path]:
        """The pieces saved so far, in order."""
        return sorted(self.directory.glob(f"{self.prefix}-*.npz"))

    def load(self, i: int, expect: dict | None = None) -> dict[str, np.ndarray] | None:
        """Piece ``i``'s columns (without the fields it records about itself), or
        None if it was not saved.

        Raises ConfigError (a ValueError) for a damaged piece (see the module
        docstring), one written with another fingerprint, or one whose arrays differ
        from ``expect`` (name -> array, e.g. a chunk's step sizes).
        """
        path = self.path(i)
        if not path.exists():
            return None
        columns = _read(path)
        if _FINGERPRINT not in columns:
            raise _damaged(path, "has no fingerprint")
        recorded = {k: columns.pop(k) for k in list(columns) if k.startswith(_RECORDED)}
        if recorded:  # written by a gflow that verifies its pieces: verify it
            self._verify(path, columns, recorded)
        saved = str(columns.pop(_FINGERPRINT))
        same = self.fingerprint is None or saved == self.fingerprint
        for name, value in (expect or {}).items():
            same &= name in columns and np.array_equal(columns[name], value)
        if not same:
            raise ConfigError(
                f"{path} was written by a different configuration; resume with "
                "the same settings, or use a new output directory"
            )
        return columns

    @staticmethod
    def _verify(path: Path, columns: dict, recorded: dict) -> None:
        if _CHECKSUM not in recorded:
            raise _damaged(path, "has no checksum")
        stored = str(recorded.pop(_CHECKSUM))
        if checksum({**columns, **recorded}) != stored:
            raise _damaged(path, "fails its checksum: it changed after it was written")
        if _NAME not in recorded or _INDEX not in recorded:
            raise _damaged(path, "records no name or no index")
        name, index = str(recorded[_NAME]), int(recorded[_INDEX])
        if name != path.stem or index != _index_in_name(path):
            raise _damaged(
                path,
                f"holds piece {index} of '{name.rsplit('-', 1)[0]}' ({name}.npz), "
                f"not {path.stem}: a piece copied or renamed over another",
            )
        times, actual = recorded.get(_TIMES), time_range(columns)
        if (times is None) != (actual is None) or (
            actual is not None and not np.array_equal(times, actual, equal_nan=True)
        ):
            raise _damaged(path, "records another time range than its t column")

    def save(self, i: int, columns: dict[str, np.ndarray]) -> None:
        """Write piece ``i`` atomically, with its index, time range and checksum:
        it is either whole on disk or absent."""
        reserved = [k for k in columns if k == _FINGERPRINT or k.startswith(_RECORDED)]
        if reserved:
            raise ValueError(f"column names reserved for the checkpoint: {reserved}")
        path = self.path(i)
        arrays = {k: np.asarray(v) for k, v in columns.items()}
        arrays[_FINGERPRINT] = np.asarray(self.fingerprint)
        arrays[_NAME] = np.asarray(path.stem)
        arrays[_INDEX] = np.asarray(_index_in_name(path), np.int64)
        if (times := time_range(columns)) is not None:
            arrays[_TIMES] = np.asarray(times, np.float64)
        arrays[_CHECKSUM] = np.asarray(checksum(arrays))
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        atomic_write_bytes(path, buf.getvalue())


def run_pieces(
    store: PieceStore,
    pieces: int,
    compute: Callable[[int, dict | None], dict[str, np.ndarray]],
    *,
    expect: Callable[[int], dict] | None = None,
    finished: Callable[[int, dict, bool], None] | None = None,
    window: Callable[[int], tuple[float, float]] | None = None,
) -> list[dict[str, np.ndarray]]:
    """Compute pieces 0 .. pieces−1 in order, reading back those already saved.

    Args:
        store: where the pieces are saved.
        pieces: how many pieces the run has.
        compute: ``compute(i, previous) -> columns``: piece i from the columns of
            piece i−1 (None for the first); a ``status`` column other than
            ``success`` ends the run after this piece is saved.
        expect: ``expect(i) -> {name: array}`` that a saved piece i must hold.
        finished: called as ``finished(i, columns, resumed)`` after each piece.
        window: ``window(i) -> (lo, hi)``: the interval that piece i's times lie in
            (compared in the dtype of its ``t`` column), where the run knows it.

    Returns:
        The columns of each piece, up to the first that did not succeed.

    Raises ConfigError for a damaged piece (``PieceStore.load``), a piece read back
    whose times leave its ``window``, and pieces with a time range (``time_range``)
    whose times do not increase: a piece must start after the last piece with times
    before it ends.
    """
    out: list[dict[str, np.ndarray]] = []
    last: tuple[int, float] | None = None  # (piece, its last time)
    for i in range(pieces):
        columns = store.load(i, expect(i) if expect else None)
        resumed = columns is not None
        if columns is None:
            columns = compute(i, out[-1] if out else None)
        if (times := time_range(columns)) is not None:
            if resumed and window is not None:
                lo, hi = np.asarray(window(i), np.asarray(columns["t"]).dtype)
                if not lo <= times[0] <= times[1] <= hi:
                    raise _damaged(
                        store.path(i),
                        f"holds times t = {times[0]:g} .. {times[1]:g}, outside "
                        f"piece {i}'s [{lo:g}, {hi:g}]",
                    )
            if last is not None and not times[0] > last[1]:
                # blame the piece read back: a computed one continues the one before
                blamed = store.path(i if resumed else last[0])
                raise _damaged(
                    blamed,
                    f"breaks the run's time order: piece {i} starts at t = "
                    f"{times[0]:g}, not after t = {last[1]:g} where piece {last[0]} "
                    "ends",
                )
            last = (i, times[1])
        if not resumed:
            store.save(i, columns)
        out.append(columns)
        if finished is not None:
            finished(i, columns, resumed)
        status = str(columns.get(STATUS, "success"))
        if status != "success":
            log.warning("%s piece %d ended with status %s", store.prefix, i, status)
            break
    return out
