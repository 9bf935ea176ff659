"""Diffrax solvers written for gradient flows: RKC2 and the Tsit5/RKC2 switch."""

from gflow.dynamics.solvers.rkc import RKC2 as RKC2
from gflow.dynamics.solvers.rkc import RKCState as RKCState
from gflow.dynamics.solvers.switch import StiffSwitch as StiffSwitch

__all__ = ["RKC2", "RKCState", "StiffSwitch"]
