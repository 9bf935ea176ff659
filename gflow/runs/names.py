"""The one table where the names a configuration gives become objects.

A configuration holds strategy names (``solver="auto"``, ``optimizer="adamw"``,
...) because names are what a user types and what ``config.json`` stores. They are
checked against these tables when the configuration is built (``NameTable.check``)
and turned into objects once, by a job's ``plan`` (``NameTable.build``); code
below that receives the objects and never reads a name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

import diffrax

from gflow.dynamics.optimizers import OPTIMIZERS as _OPTIMIZER_CLASSES
from gflow.dynamics.optimizers import AbstractOptimizer, optimizer_named
from gflow.dynamics.references.central import CentralFlowReference
from gflow.dynamics.references.flow import FlowReference, ModifiedFlowReference
from gflow.dynamics.schedules import warmup_cosine
from gflow.dynamics.solvers import EXPRB32, RKC2, ROCK4, AutoSwitch, StiffSwitch
from gflow.runs.config import ConfigError

T = TypeVar("T")


class NameTable(Mapping[str, Callable[..., T] | None], Generic[T]):
    """The names of one kind of strategy and, for each, what builds its object.

    A mapping name -> builder (a class or function); ``check`` refuses an unknown
    name with a ConfigError listing the known ones, ``build`` calls the builder.
    """

    def __init__(self, kind: str, builders: Mapping[str, Callable[..., T] | None]):
        self.kind = kind
        self._builders = dict(builders)

    def __getitem__(self, name: str) -> Callable[..., T] | None:
        return self._builders[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._builders)

    def __len__(self) -> int:
        return len(self._builders)

    def __repr__(self) -> str:
        return f"NameTable({self.kind!r}, {list(self._builders)})"

    def check(self, field: str, name: str) -> None:
        """ConfigError ``field: unknown <kind> 'name'; choose one of ...``."""
        if name not in self._builders:
            raise ConfigError(
                f"{field}: unknown {self.kind} {name!r}; choose one of "
                f"{', '.join(self._builders)}"
            )

    def build(self, name: str, *args: Any, **kwargs: Any) -> T:
        """The object called ``name``, built with ``args`` and ``kwargs``."""
        self.check(self.kind, name)
        if self._builders[name] is None:
            raise TypeError(f"the {self.kind} {name!r} is a name only: no builder")
        return self._builders[name](*args, **kwargs)


#: Diffrax's solvers and gflow's own (``gflow.solvers``) by the names of ``--solver``.
SOLVERS: NameTable[diffrax.AbstractSolver] = NameTable(
    "solver",
    {
        "auto": AutoSwitch,
        "euler": diffrax.Euler,
        "heun": diffrax.Heun,
        "bosh3": diffrax.Bosh3,
        "tsit5": diffrax.Tsit5,
        "dopri5": diffrax.Dopri5,
        "dopri8": diffrax.Dopri8,
        "kvaerno5": diffrax.Kvaerno5,
        "rkc2": RKC2,
        "rock4": ROCK4,
        "exprb32": EXPRB32,
        "stiff": StiffSwitch,
    },
)

#: The optimizers of ``gflow.dynamics``, built from a configuration's β, weight
#: decay and ε (``optimizer_named``).
OPTIMIZERS: NameTable[AbstractOptimizer] = NameTable(
    "optimizer",
    {
        name: (lambda n: lambda **kw: optimizer_named(n, **kw))(name)
        for name in _OPTIMIZER_CLASSES
    },
)

#: The references a sweep compares its members with (the central flow is the
#: optimizer's own: ``central_flow_of``).
REFERENCES = NameTable(
    "reference",
    {
        "flow": FlowReference,
        "modified": ModifiedFlowReference,
        "central": CentralFlowReference,
    },
)


def _constant(peak: float, *, steps: int, warmup_steps: int):
    return peak


def _warmup_cosine(peak: float, *, steps: int, warmup_steps: int):
    return functools.partial(
        warmup_cosine, peak=peak, warmup=max(1, warmup_steps), total=steps
    )


#: Step-size schedules of ``gflow train``: the step size itself, or the linear
#: warmup from 0 to the peak then cosine decay to 0 at the last step
#: (``gflow.dynamics.schedules.warmup_cosine``, the one ``gflow text`` uses too; the
#: values of optax's ``warmup_cosine_decay_schedule``).
SCHEDULES = NameTable(
    "schedule", {"constant": _constant, "warmup-cosine": _warmup_cosine}
)

#: How a deterministic text run follows the flow: full-batch GD or the flow itself
#: (names only: the text job reads them).
METHODS = NameTable("method", dict.fromkeys(("gd", "flow")))

#: The models a text run trains: the one-layer ``AttentionModel`` (a
#: ``PositionalAttentionModel`` with positions) or the deep ``Transformer`` (names
#: only: the text job reads them).
MODELS = NameTable("model", dict.fromkeys(("attention", "transformer")))

#: Every kind of strategy a configuration can name, by kind.
NAMES: dict[str, NameTable] = {
    t.kind: t for t in (SOLVERS, OPTIMIZERS, REFERENCES, SCHEDULES, METHODS, MODELS)
}
