"""The finished runs of a text run, each saved the moment it ends, so that an
interrupted ``gflow text`` continues with ``--resume RUN_DIR`` and loses at most the
run it was in.

Each run (a seed's reference run or its optimizer arm, observables included) is one
checkpoint piece ``pieces/<name>-000.npz`` (``gflow.runs.checkpoint.PieceStore``)
stamped with the fingerprint of everything that determines it: the configuration
(less where the tokeniser was read from) and the data (the fixed sample, the
vocabulary, the tracked queries). A piece written by another configuration is
refused rather than mixed in.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from gflow.dynamics.trajectory import Trajectory
from gflow.runs.checkpoint import PieceStore, fingerprint
from gflow.runs.files import to_json
from gflow.runs.trajectory_files import param_columns, params_from_columns

#: settings whose default has changed, at the default their earlier runs were hashed
#: with: the flow's solver was Tsit5 until the stiffness-aware default (issue 31), so
#: a run of Tsit5 keeps its pieces and one of the new default is another computation
_HASHED_DEFAULTS = {"solver": "tsit5"}


def text_fingerprint(cfg, data) -> str:
    """The hash of a text run's configuration and data (``TextConfig``,
    ``TextData``). Settings at their defaults are left out, so that a setting added
    to gflow later, at a default that computes what was computed before, does not
    orphan the pieces of a run started earlier."""
    default = {f.name: f.default for f in dataclasses.fields(cfg)} | _HASHED_DEFAULTS
    settings = {
        k: v
        for k, v in dataclasses.asdict(cfg).items()
        if k not in cfg.not_results and v != default[k]
    }
    settings["vocab"] = list(data.vocab.tokens)
    settings["queries"] = list(data.queries)
    settings["top"] = list(data.top)
    return fingerprint(
        np.asarray(data.sample), np.asarray(data.row_sample), settings=settings
    )


class RunPieces:
    """The finished runs of one text run directory (``directory/pieces``)."""

    def __init__(self, directory, cfg, data):
        self.directory = Path(directory) / "pieces"
        self.fingerprint = text_fingerprint(cfg, data)

    def _store(self, name: str) -> PieceStore:
        return PieceStore(self.directory, name, self.fingerprint)

    def save(self, name: str, traj: Trajectory) -> None:
        """Write run ``name`` (no parameter snapshots: the observables are in its
        metrics) atomically."""
        if traj.params is not None:
            raise ValueError("save the observed run, without parameter snapshots")
        columns = {"t": np.asarray(traj.t)}
        columns |= {f"metric:{k}": np.asarray(v) for k, v in traj.metrics.items()}
        columns |= param_columns(traj.final)
        columns["status"] = np.asarray(traj.status)
        columns["stats"] = np.asarray(to_json(traj.stats, indent=None))
        columns["info"] = np.asarray(to_json(traj.info, indent=None))
        self.directory.mkdir(parents=True, exist_ok=True)
        self._store(name).save(0, columns)

    def load(self, name: str, template) -> Trajectory | None:
        """Run ``name`` as saved (its final model shaped as ``template``), or None
        if it has not finished. Raises ValueError for a piece of another run."""
        columns = self._store(name).load(0)
        if columns is None:
            return None
        final = params_from_columns(columns, template)
        return Trajectory(
            t=columns["t"],
            metrics={
                k.removeprefix("metric:"): v
                for k, v in columns.items()
                if k.startswith("metric:")
            },
            final=final,
            status=str(columns["status"]),
            stats=json.loads(str(columns["stats"])),
            info=json.loads(str(columns["info"])),
        )
