"""Diffrax solvers written for gradient flows: the stabilised RKC2 and ROCK4, the
exponential Rosenbrock EXPRB32, the Tsit5/RKC2 switch and the stiffness-aware default
AutoSwitch (Tsit5, then EXPRB32)."""

from gflow.dynamics.solvers.auto import AutoState as AutoState
from gflow.dynamics.solvers.auto import AutoSwitch as AutoSwitch
from gflow.dynamics.solvers.exprb import EXPRB32 as EXPRB32
from gflow.dynamics.solvers.exprb import ExpState as ExpState
from gflow.dynamics.solvers.rkc import RKC2 as RKC2
from gflow.dynamics.solvers.rkc import RKCState as RKCState
from gflow.dynamics.solvers.rock4 import ROCK4 as ROCK4
from gflow.dynamics.solvers.switch import StiffSwitch as StiffSwitch

__all__ = [
    "AutoState",
    "AutoSwitch",
    "EXPRB32",
    "ExpState",
    "RKC2",
    "RKCState",
    "ROCK4",
    "StiffSwitch",
]
