"""Diffrax solvers written for gradient flows (issue 5)."""

from .rkc import RKC2, RKCState
from .switch import StiffSwitch

__all__ = ["RKC2", "RKCState", "StiffSwitch"]
