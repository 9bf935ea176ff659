"""Leafwise arithmetic on pytrees (parameters, optimizer states, solver states).

One home for the small tree helpers that loops and solvers share, as Optimistix's
``_misc.py`` and Lineax's ``_norm.py`` are for theirs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, PyTree, Scalar


def tree_axpy(a: Scalar | float, x: PyTree, y: PyTree) -> PyTree:
    """a·x + y, leaf by leaf."""
    return jax.tree.map(lambda xi, yi: a * xi + yi, x, y)


def tree_scale(a: Scalar | float, x: PyTree) -> PyTree:
    """a·x, leaf by leaf."""
    return jax.tree.map(lambda xi: a * xi, x)


def tree_norm(x: PyTree) -> Scalar:
    """The Euclidean norm over all leaves, √Σ x²."""
    return jnp.sqrt(sum(jnp.sum(leaf**2) for leaf in jax.tree.leaves(x)))


def tree_where(pred: Bool[Array, ""], on_true: PyTree, on_false: PyTree) -> PyTree:
    """Leafwise ``jnp.where(pred, a, b)`` over two trees of the same structure."""
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)
