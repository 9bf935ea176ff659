"""Diffrax solvers written for gradient flows: the stabilised RKC2 and ROCK4, the
exponential Rosenbrock EXPRB32, RKC2 with the outlying eigendirections split off
(SplitRKC2), the Tsit5/RKC2 switch and the stiffness-aware default
AutoSwitch (Tsit5, then EXPRB32); the watcher that records a solve's step size and
shows its progress, and the report of a solve that stalled.

Public names: each solver with its state, and the single steps and tables that
the tests check against closed forms.
"""

# The default: Tsit5, then EXPRB32
from gflow.dynamics.solvers.auto import AutoState as AutoState
from gflow.dynamics.solvers.auto import AutoSwitch as AutoSwitch
from gflow.dynamics.solvers.auto import hermite_stages as hermite_stages
from gflow.dynamics.solvers.auto import tsit5_step as tsit5_step

# Exponential Rosenbrock
from gflow.dynamics.solvers.exprb import EXPRB32 as EXPRB32
from gflow.dynamics.solvers.exprb import ExpState as ExpState
from gflow.dynamics.solvers.exprb import exprb32_step as exprb32_step
from gflow.dynamics.solvers.exprb import lanczos as lanczos
from gflow.dynamics.solvers.exprb import phi as phi

# Stabilised Runge-Kutta-Chebyshev
from gflow.dynamics.solvers.rkc import DAMPING as DAMPING
from gflow.dynamics.solvers.rkc import RKC2 as RKC2
from gflow.dynamics.solvers.rkc import RKCState as RKCState
from gflow.dynamics.solvers.rkc import num_stages as num_stages

# ROCK4
from gflow.dynamics.solvers.rock4 import DEGREES as DEGREES
from gflow.dynamics.solvers.rock4 import MAX_STAGES as MAX_STAGES
from gflow.dynamics.solvers.rock4 import ROCK4 as ROCK4
from gflow.dynamics.solvers.rock4 import degree_index as degree_index
from gflow.dynamics.solvers.rock4 import rock4_step as rock4_step
from gflow.dynamics.solvers.rock4 import stages_needed as stages_needed

# RKC2 with the outlying eigendirections split off
from gflow.dynamics.solvers.split import SplitRKC2 as SplitRKC2
from gflow.dynamics.solvers.split import SplitState as SplitState
from gflow.dynamics.solvers.split import subspace_step as subspace_step

# The Tsit5/RKC2 switch
from gflow.dynamics.solvers.switch import StiffSwitch as StiffSwitch

# Watching a solve: its step size, progress lines, and why it stalled
from gflow.dynamics.solvers.stall import StallReport as StallReport
from gflow.dynamics.solvers.stall import hessian_top as hessian_top
from gflow.dynamics.solvers.stall import stall_report as stall_report
from gflow.dynamics.solvers.stall import suggest as suggest
from gflow.dynamics.solvers.watch import Watched as Watched
from gflow.dynamics.solvers.watch import WatchState as WatchState
from gflow.dynamics.solvers.watch import progress_line as progress_line
from gflow.dynamics.solvers.watch import unset_tolerances as unset_tolerances
from gflow.dynamics.solvers.watch import (
    with_stepsize_tolerances as with_stepsize_tolerances,
)

__all__ = [
    "AutoState",
    "AutoSwitch",
    "DAMPING",
    "DEGREES",
    "EXPRB32",
    "ExpState",
    "MAX_STAGES",
    "RKC2",
    "RKCState",
    "ROCK4",
    "SplitRKC2",
    "SplitState",
    "StallReport",
    "StiffSwitch",
    "WatchState",
    "Watched",
    "degree_index",
    "exprb32_step",
    "hermite_stages",
    "hessian_top",
    "lanczos",
    "num_stages",
    "phi",
    "progress_line",
    "rock4_step",
    "stages_needed",
    "stall_report",
    "subspace_step",
    "suggest",
    "tsit5_step",
    "unset_tolerances",
    "with_stepsize_tolerances",
]
