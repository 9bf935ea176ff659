"""Annotation aliases shared by gflow's layers (jaxtyping; the tests check them).

Shape names used in annotations across the package, as in the docstrings: d the
vocabulary size, m the model width (d_model), s the context length (s1 = s + 1 with
the target), b a batch, n saved times (or the flat parameters, for Hessians), M the
members of a sweep, S the saves of a member, q tracked queries, k leading singular
values or directions. A name starting with an underscore is not checked (members'
saves of different lengths, say).

The test suite runs with jaxtyping's import hook and beartype on every gflow module
(pyproject.toml, ``--jaxtyping-packages``): a wrong dtype, rank or mismatched size
raises ``jaxtyping.TypeCheckError`` there; outside the tests nothing is checked.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jaxtyping import Array, ArrayLike, Float, PyTree, Real

#: A model: an Equinox Module (any pytree) whose floating-point array leaves are the
#: parameters that runs move.
Model = PyTree

#: ``loss_fn(model) -> scalar``: an eqx.Module (its arrays traced) or a function.
LossFn = Callable[[Any], Float[Array, ""]]

#: What a run records next to the loss: a dict name -> ``fn(model)``, or one callable
#: returning such a dict (an eqx.Module), or None.
Observables = Mapping[str, Callable[[Any], Any]] | Callable[[Any], Any] | None

#: A 1-D run of real numbers: an array, or a list or tuple of numbers.
RealVector = Real[ArrayLike, " _n"] | Sequence[float]

__all__ = ["LossFn", "Model", "Observables", "RealVector"]
