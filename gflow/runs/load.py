"""Read a whole run directory back: ``load_run``."""

from __future__ import annotations

from pathlib import Path

from gflow.runs.files import read_json
from gflow.runs.sweep_run import load_sweep
from gflow.runs.trajectory_files import load_trajectory


def load_run(run_dir) -> dict:
    """Everything in a run directory: ``config`` and one Trajectory per saved run.

    Returns:
        dict with ``"config"`` (the resolved configuration) and, for each trajectory
        saved there (``flow``, ``optimizer`` ..., each member ``train_lr<η>_s<seed>``
        of a training sweep, listed in its config's ``members``), its name ->
        Trajectory; for a ``gflow sweep`` directory also ``"sweep"`` (sweep.json)
        and ``"members"`` (the SweepRun of its members, ``.member(m)`` a
        Trajectory).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    out = {"config": read_json(run_dir / "config.json")}
    for meta in sorted(run_dir.glob("*.json")):
        if (run_dir / f"{meta.stem}_metrics.npz").exists():
            out[meta.stem] = load_trajectory(run_dir, name=meta.stem)
    if out["config"].get("command") == "sweep" and (run_dir / "sweep.json").exists():
        out.update(load_sweep(run_dir))
    return out
