"""Run directories: atomic writes, saving and loading trajectories."""

from __future__ import annotations

import csv
import io as _io
import json
import os
import tempfile
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

from .model import AttentionModel
from .trajectory import Trajectory


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path`` then rename it into place.

    A run killed part-way leaves either the old file or none, never a half-written one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; run files are for sharing
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path, obj) -> None:
    """Atomically write ``obj`` as indented JSON (NumPy scalars and arrays allowed)."""

    def default(x):
        if isinstance(x, (np.generic, np.ndarray)):
            return x.tolist()
        if isinstance(x, jax.Array):
            return np.asarray(x).tolist()
        raise TypeError(f"cannot write {type(x).__name__} to JSON")

    atomic_write_bytes(
        path, (json.dumps(obj, indent=2, default=default) + "\n").encode()
    )


def read_json(path):
    with open(path) as f:
        return json.load(f)


def _flat_columns(t, metrics) -> dict[str, np.ndarray]:
    cols = {"t": np.asarray(t)}
    names = sorted(metrics, key=lambda k: (k != "loss", k != "grad_norm", k))
    for name in names:
        value = np.asarray(metrics[name])
        if value.ndim == 1:
            cols[name] = value
            continue
        flat = value.reshape(value.shape[0], -1)
        for j, idx in enumerate(np.ndindex(*value.shape[1:])):
            cols[name + "_" + "_".join(map(str, idx))] = flat[:, j]
    return cols


def metrics_csv(t, metrics) -> bytes:
    """One row per saved time, one column per scalar (arrays flattened as name_i_j)."""
    cols = _flat_columns(t, metrics)
    buf = _io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(cols)
    for row in zip(*cols.values()):
        writer.writerow([repr(float(x)) for x in row])
    return buf.getvalue().encode()


def _model_config(model) -> dict:
    return {
        "d_vocab": model.d_vocab,
        "d_model": model.d_model,
        "tau": model.tau,
        "factorised": model.W_K is not None,
        "residual": model.residual,
        "dtype": str(model.W_E.dtype),
    }


def _template(cfg: dict) -> AttentionModel:
    """An AttentionModel of the saved shapes, with ShapeDtypeStruct leaves: no random
    draws run (they would compile), Equinox deserialises into it all the same."""
    return eqx.filter_eval_shape(
        lambda key: AttentionModel.init(
            d_vocab=cfg["d_vocab"],
            d_model=cfg["d_model"],
            key=key,
            tau=cfg["tau"],
            factorised=cfg["factorised"],
            residual=cfg["residual"],
            dtype=np.dtype(cfg["dtype"]),
        ),
        jax.random.key(0),
    )


_PARAM = "param:"  # prefix of the parameter-snapshot columns in a checkpoint


def param_columns(params) -> dict[str, np.ndarray]:
    """The array leaves of a time-stacked model as named columns."""
    leaves = jax.tree.leaves(eqx.filter(params, eqx.is_inexact_array))
    return {f"{_PARAM}{i}": np.asarray(x) for i, x in enumerate(leaves)}


def params_from_columns(columns: dict, model):
    """Pop the parameter columns out of ``columns``; the time-stacked model."""
    dynamic, static = eqx.partition(model, eqx.is_inexact_array)
    treedef = jax.tree.structure(dynamic)
    leaves = [columns.pop(f"{_PARAM}{i}") for i in range(treedef.num_leaves)]
    return eqx.combine(jax.tree.unflatten(treedef, leaves), static)


def _serialise(model) -> bytes:
    buf = _io.BytesIO()
    eqx.tree_serialise_leaves(buf, model)
    return buf.getvalue()


def save_trajectory(run_dir, traj: Trajectory, *, name: str = "flow") -> None:
    """Write a trajectory into ``run_dir`` as ``{name}_metrics.csv`` (readable by
    pandas/polars), ``{name}_metrics.npz`` (full arrays), ``{name}_final.eqx``
    (Equinox serialisation), optional ``{name}_params.eqx`` snapshots and
    ``{name}.json`` (status, statistics, model configuration)."""
    run_dir = Path(run_dir)
    atomic_write_bytes(
        run_dir / f"{name}_metrics.csv", metrics_csv(traj.t, traj.metrics)
    )
    buf = _io.BytesIO()
    np.savez(buf, t=traj.t, **traj.metrics)
    atomic_write_bytes(run_dir / f"{name}_metrics.npz", buf.getvalue())
    atomic_write_bytes(run_dir / f"{name}_final.eqx", _serialise(traj.final))
    if traj.params is not None:
        atomic_write_bytes(run_dir / f"{name}_params.eqx", _serialise(traj.params))
    write_json(
        run_dir / f"{name}.json",
        {
            "status": traj.status,
            "stats": traj.stats,
            "info": traj.info,
            "model": _model_config(traj.final),
            "num_saves": len(traj),
        },
    )


def load_trajectory(run_dir, *, name: str = "flow") -> Trajectory:
    """Read back what ``save_trajectory`` wrote."""
    run_dir = Path(run_dir)
    meta_path = run_dir / f"{name}.json"
    if not meta_path.exists():
        raise FileNotFoundError(
            f"{meta_path} not found: is {run_dir} a gflow run directory?"
        )
    meta = read_json(meta_path)
    with np.load(run_dir / f"{name}_metrics.npz") as data:
        arrays = {k: data[k] for k in data.files}
    t = arrays.pop("t")
    template = _template(meta["model"])
    final = eqx.tree_deserialise_leaves(run_dir / f"{name}_final.eqx", template)
    params = None
    if (run_dir / f"{name}_params.eqx").exists():
        n = meta["num_saves"]
        like = jax.tree.map(lambda x: np.zeros((n, *x.shape), x.dtype), template)
        params = eqx.tree_deserialise_leaves(run_dir / f"{name}_params.eqx", like)
    return Trajectory(
        t=t,
        metrics=arrays,
        final=final,
        params=params,
        status=meta["status"],
        stats=meta["stats"],
        info=meta["info"],
    )


def load_run(run_dir) -> dict:
    """Everything in a run directory: ``config`` and one Trajectory per saved run.

    Returns:
        dict with ``"config"`` (the resolved configuration) and, for each trajectory
        saved there (``flow``, ``optimizer`` ...), its name -> Trajectory; for a
        ``gflow sweep`` directory also ``"sweep"`` (sweep.json) and ``"members"``
        (the SweepRun of its members, ``.member(m)`` a Trajectory).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    out = {"config": read_json(run_dir / "config.json")}
    for meta in sorted(run_dir.glob("*.json")):
        if (run_dir / f"{meta.stem}_metrics.npz").exists():
            out[meta.stem] = load_trajectory(run_dir, name=meta.stem)
    if out["config"].get("command") == "sweep" and (run_dir / "sweep.json").exists():
        from .sweep_run import load_sweep  # the sweep layer sits above this one

        out.update(load_sweep(run_dir))
    return out
