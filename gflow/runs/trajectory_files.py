"""Trajectories on disk: metrics as CSV and NPZ, models as Equinox serialisations.

A model is read back into a template of the saved shapes and dtypes (``model`` in
``{name}.json``). A float64 run read in a process without x64 comes back with NumPy
float64 arrays (JAX would round them to float32); enable x64 before loading to get
JAX arrays.
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any, ClassVar

import equinox as eqx
import jax
import numpy as np

from gflow.dynamics.trajectory import Trajectory
from gflow.problems.model import AttentionModel
from gflow.problems.transformer import Transformer
from gflow.runs.files import atomic_write_bytes, metrics_csv, read_json, write_json
from gflow.text.positional import PositionalAttentionModel


@dataclasses.dataclass(frozen=True)
class SavedModel:
    """A trajectory's model as ``{name}.json`` records it (``"model"``): its class
    and constructor settings, from which a template of its shapes and dtype is
    built to read it into.

    ``kind`` is ``"Transformer"``, ``"PositionalAttentionModel"`` (the one-layer
    model's settings and ``context_length``) or None: the one-layer
    ``AttentionModel`` (run directories before 0.2 hold only these and name no
    ``"class"``).
    """

    d_vocab: int
    d_model: int
    tau: float
    dtype: str
    residual: bool
    kind: str | None = None
    factorised: bool = True
    context_length: int | None = None
    n_layers: int = 1
    n_heads: int = 1
    d_ff: int | None = None
    value: bool = False
    layernorm: bool = False
    max_len: int | None = None

    #: The settings each kind records besides its ``"class"``.
    RECORDED: ClassVar[dict[str | None, tuple[str, ...]]] = {
        None: ("d_vocab", "d_model", "tau", "factorised", "residual", "dtype"),
        "PositionalAttentionModel": (
            *("d_vocab", "d_model", "tau", "factorised", "residual", "dtype"),
            "context_length",
        ),
        "Transformer": (
            *("d_vocab", "d_model", "n_layers", "n_heads", "d_ff", "value"),
            *("layernorm", "residual", "max_len", "tau", "dtype"),
        ),
    }

    @classmethod
    def of(cls, model) -> SavedModel:
        """The record of ``model``."""
        if isinstance(model, PositionalAttentionModel):
            context = int(model.W_pos.shape[0])
            base = cls.of(model.base)
            return dataclasses.replace(
                base, kind=type(model).__name__, context_length=context
            )
        common = dict(
            d_vocab=model.d_vocab,
            d_model=model.d_model,
            tau=float(model.tau),
            dtype=str(model.W_E.dtype),
            residual=model.residual,
        )
        if not isinstance(model, Transformer):
            return cls(**common, factorised=model.W_K is not None)
        block = model.blocks[0]
        return cls(
            **common,
            kind="Transformer",
            n_layers=model.n_layers,
            n_heads=model.n_heads,
            d_ff=None if block.mlp is None else int(block.mlp.W_in.shape[1]),
            value=block.W_V is not None,
            layernorm=model.ln_final is not None,
            max_len=None if model.W_pos is None else int(model.W_pos.shape[0]),
        )

    @classmethod
    def from_json(cls, data: Any) -> SavedModel:
        """The record ``{name}.json`` holds (of any gflow version)."""
        settings = {k: v for k, v in data.items() if k != "class"}
        return cls(**{**settings, "tau": float(data["tau"])}, kind=data.get("class"))

    def init(self, key, dtype):
        """The model this record describes, drawn with ``key`` in ``dtype``."""
        if self.kind == "Transformer":
            settings = {k: getattr(self, k) for k in self.RECORDED[self.kind]}
            return Transformer.init(**{**settings, "key": key, "dtype": dtype})
        one_layer = dict(
            d_vocab=self.d_vocab,
            d_model=self.d_model,
            key=key,
            tau=self.tau,
            factorised=self.factorised,
            residual=self.residual,
            dtype=dtype,
        )
        if self.kind == "PositionalAttentionModel":
            return PositionalAttentionModel.init(
                context_length=self.context_length, **one_layer
            )
        return AttentionModel.init(**one_layer)

    def template(self):
        """A model of the saved shapes, with ShapeDtypeStruct leaves: no random
        draws run (they would compile), Equinox deserialises into it all the same.

        A float64 run read where JAX has no float64 (x64 off, as in a fresh
        notebook) gets NumPy float64 leaves instead: the run comes back in the
        dtype it was written in, not rounded to float32.
        """
        saved = np.dtype(self.dtype)
        usable = jax.dtypes.canonicalize_dtype(saved)
        template = eqx.filter_eval_shape(
            lambda key: self.init(key, usable), jax.random.key(0)
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
    model = SavedModel.of(traj.final)
    record = {"class": model.kind} if model.kind is not None else {}
    record |= {k: getattr(model, k) for k in SavedModel.RECORDED[model.kind]}
    write_json(
        run_dir / f"{name}.json",
        {
            "status": traj.status,
            "stats": traj.stats,
            "info": traj.info,
            "model": record,
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
    template = SavedModel.from_json(meta["model"]).template()
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
