"""One checkpoint/resume driver for long runs cut into pieces (flow segments, sweep
chunks).

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
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Callable
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

from gflow.runs.config import ConfigError
from gflow.runs.files import atomic_write_bytes

log = logging.getLogger(__name__)

#: The column that holds a piece's status (absent: ``success``).
STATUS = "status"


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
        """Piece ``i``'s arrays, or None if it was not saved.

        Raises ValueError if it was written with another fingerprint or its arrays
        differ from ``expect`` (name -> array, e.g. a chunk's step sizes).
        """
        path = self.path(i)
        if not path.exists():
            return None
        with np.load(path, allow_pickle=False) as data:
            columns = {k: data[k] for k in data.files}
        saved = str(columns.pop("fingerprint"))
        same = self.fingerprint is None or saved == self.fingerprint
        for name, value in (expect or {}).items():
            same &= name in columns and np.array_equal(columns[name], value)
        if not same:
            raise ConfigError(
                f"{path} was written by a different configuration; resume with "
                "the same settings, or use a new output directory"
            )
        return columns

    def save(self, i: int, columns: dict[str, np.ndarray]) -> None:
        """Write piece ``i`` atomically: it is either whole on disk or absent."""
        buf = io.BytesIO()
        np.savez(buf, fingerprint=np.asarray(self.fingerprint), **columns)
        atomic_write_bytes(self.path(i), buf.getvalue())


def run_pieces(
    store: PieceStore,
    pieces: int,
    compute: Callable[[int, dict | None], dict[str, np.ndarray]],
    *,
    expect: Callable[[int], dict] | None = None,
    finished: Callable[[int, dict, bool], None] | None = None,
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

    Returns:
        The columns of each piece, up to the first that did not succeed.
    """
    out: list[dict[str, np.ndarray]] = []
    for i in range(pieces):
        columns = store.load(i, expect(i) if expect else None)
        resumed = columns is not None
        if columns is None:
            columns = compute(i, out[-1] if out else None)
            store.save(i, columns)
        out.append(columns)
        if finished is not None:
            finished(i, columns, resumed)
        status = str(columns.get(STATUS, "success"))
        if status != "success":
            log.warning("%s piece %d ended with status %s", store.prefix, i, status)
            break
    return out
