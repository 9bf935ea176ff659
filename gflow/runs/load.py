"""Read a whole run directory back: ``load_run``."""

from __future__ import annotations

from pathlib import Path

from gflow.runs.files import read_json
from gflow.runs.run_dir import Run, RunDirectory, RunDocument
from gflow.runs.sweep_run import load_sweep
from gflow.runs.trajectory_files import load_trajectory


def load_run(run_dir) -> Run:
    """Everything in a run directory, as a typed ``Run``.

    ``run.command`` says which command wrote it (from config.json, or for a
    directory of an earlier gflow version from the files it holds);
    ``run.trajectories`` holds one Trajectory per saved run (``flow``,
    ``optimizer`` ..., each member ``train_lr<η>_s<seed>`` of a training sweep);
    a ``gflow sweep`` directory also has ``run.sweep`` (sweep.json) and
    ``run.members`` (the SweepRun of its members, ``.member(m)`` a Trajectory).
    ``run["flow"]``, ``run["config"]`` (the whole config.json) and
    ``run["sweep"]`` read as before.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    directory = RunDirectory(run_dir)
    json = read_json(directory.config_path)
    document = RunDocument(directory.command(json), json)
    sweep = members = None
    if document.command == "sweep" and (run_dir / "sweep.json").exists():
        sweep, members = load_sweep(run_dir, document.settings)
    trajectories = {
        name: load_trajectory(run_dir, name=name)
        for name in directory.trajectory_names()
    }
    return Run(run_dir, document, trajectories, sweep, members)
