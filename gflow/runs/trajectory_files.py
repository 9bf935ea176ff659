"""Trajectories on disk: metrics as CSV and NPZ, models as Equinox serialisations.

A model is read back into a template of the saved shapes and dtypes (``model`` in
``{name}.json``). A float64 run read in a process without x64 comes back with NumPy
float64 arrays (JAX would round them to float32); enable x64 before loading to get
JAX arrays.
"""

from __future__ import annotations

import io
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

from gflow.dynamics.trajectory import Trajectory
from gflow.problems.model import AttentionModel
from gflow.problems.transformer import Transformer
from gflow.runs.files import atomic_write_bytes, metrics_csv, read_json, write_json
from gflow.text.positional import PositionalAttentionModel


def _model_config(model) -> dict:
    """The constructor settings of a saved model, for its template when read back."""
    if isinstance(model, PositionalAttentionModel):
        return {
            **_model_config(model.base),
            "class": "PositionalAttentionModel",
            "context_length": int(model.W_pos.shape[0]),
        }
    if isinstance(model, Transformer):
        block = model.blocks[0]
        return {
            "class": "Transformer",
            "d_vocab": model.d_vocab,
            "d_model": model.d_model,
            "n_layers": model.n_layers,
            "n_heads": model.n_heads,
            "d_ff": None if block.mlp is None else int(block.mlp.W_in.shape[1]),
            "value": block.W_V is not None,
            "layernorm": model.ln_final is not None,
            "residual": model.residual,
            "max_len": None if model.W_pos is None else int(model.W_pos.shape[0]),
            "tau": model.tau,
            "dtype": str(model.W_E.dtype),
        }
    return {
        "d_vocab": model.d_vocab,
        "d_model": model.d_model,
        "tau": model.tau,
        "factorised": model.W_K is not None,
        "residual": model.residual,
        "dtype": str(model.W_E.dtype),
    }


def _init(cfg: dict, key, dtype):
    """The model that ``_model_config`` describes (run directories before 0.2 hold
    one-layer AttentionModels and say no ``class``; a positional one says
    ``PositionalAttentionModel`` and its ``context_length``)."""
    if cfg.get("class") == "Transformer":
        options = ("n_layers", "n_heads", "d_ff", "value", "layernorm", "residual")
        return Transformer.init(
            d_vocab=cfg["d_vocab"],
            d_model=cfg["d_model"],
            key=key,
            tau=cfg["tau"],
            max_len=cfg["max_len"],
            dtype=dtype,
            **{k: cfg[k] for k in options},
        )
    one_layer = dict(
        d_vocab=cfg["d_vocab"],
        d_model=cfg["d_model"],
        key=key,
        tau=cfg["tau"],
        factorised=cfg["factorised"],
        residual=cfg["residual"],
        dtype=dtype,
    )
    if cfg.get("class") == "PositionalAttentionModel":
        return PositionalAttentionModel.init(
            context_length=cfg["context_length"], **one_layer
        )
    return AttentionModel.init(**one_layer)


def _template(cfg: dict):
    """A model of the saved shapes, with ShapeDtypeStruct leaves: no random draws
    run (they would compile), Equinox deserialises into it all the same.

    A float64 run read where JAX has no float64 (x64 off, as in a fresh notebook)
    gets NumPy float64 leaves instead: the run comes back in the dtype it was
    written in, not rounded to float32.
    """
    saved = np.dtype(cfg["dtype"])
    usable = jax.dtypes.canonicalize_dtype(saved)
    template = eqx.filter_eval_shape(
        lambda key: _init(cfg, key, usable), jax.random.key(0)
    )
    if usable == saved:
        return template
    return jax.tree.map(
        lambda x: np.zeros(x.shape, saved) if x.dtype == usable else x, template
    )


def param_columns(
    params, prefix: str = "param:", keep=eqx.is_inexact_array
) -> dict[str, np.ndarray]:
    """The leaves of a model (time-stacked or not) that ``keep`` selects (default the
    floating-point ones; ``eqx.is_array`` for an optimizer state, counts included)
    as named columns ``<prefix><i>``, for a checkpoint's .npz."""
    leaves = jax.tree.leaves(eqx.filter(params, keep))
    return {f"{prefix}{i}": np.asarray(x) for i, x in enumerate(leaves)}


def params_from_columns(
    columns: dict, model, prefix: str = "param:", keep=eqx.is_inexact_array
):
    """Pop the columns ``param_columns`` wrote out of ``columns``; the model with
    those leaves (``model`` is the template of its structure, ``keep`` as there)."""
    dynamic, static = eqx.partition(model, keep)
    treedef = jax.tree.structure(dynamic)
    leaves = [columns.pop(f"{prefix}{i}") for i in range(treedef.num_leaves)]
    return eqx.combine(jax.tree.unflatten(treedef, leaves), static)


def serialise(model) -> bytes:
    buf = io.BytesIO()
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
    buf = io.BytesIO()
    np.savez(buf, t=traj.t, **traj.metrics)
    atomic_write_bytes(run_dir / f"{name}_metrics.npz", buf.getvalue())
    atomic_write_bytes(run_dir / f"{name}_final.eqx", serialise(traj.final))
    if traj.params is not None:
        atomic_write_bytes(run_dir / f"{name}_params.eqx", serialise(traj.params))
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
