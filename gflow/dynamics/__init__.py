"""How parameters move: gradient flows, optimizer runs on the shared clock t = Σ η,
solvers, reference flows and learning-rate sweeps.

Public names, by concept: the saved ``Trajectory``; the flow (``solve_flow``);
the interrupt watch a flow asks (``SignalWatch``); optimizers and their runs
(full-batch, minibatch, swept over step sizes). The solvers and the reference
flows are the sub-packages ``gflow.dynamics.solvers`` and
``gflow.dynamics.references``.
"""

# Sub-packages
from gflow.dynamics import references as references
from gflow.dynamics import solvers as solvers

# Trajectories
from gflow.dynamics.trajectory import STATUSES as STATUSES
from gflow.dynamics.trajectory import Status as Status
from gflow.dynamics.trajectory import Trajectory as Trajectory
from gflow.dynamics.trajectory import parameter_distance as parameter_distance
from gflow.dynamics.schedules import AbstractSchedule as AbstractSchedule
from gflow.dynamics.schedules import Constant as Constant
from gflow.dynamics.schedules import WarmupCosine as WarmupCosine
from gflow.dynamics.schedules import warmup_cosine as warmup_cosine
from gflow.dynamics.metrics import evaluate_metrics as evaluate_metrics
from gflow.dynamics.metrics import gradient_norm as gradient_norm

# The gradient flow
from gflow.dynamics.flow import FlatGradientField as FlatGradientField
from gflow.dynamics.flow import GradientField as GradientField
from gflow.dynamics.flow import grad_evals_per_step as grad_evals_per_step
from gflow.dynamics.flow import solve_flow as solve_flow
from gflow.dynamics.interrupt import SignalWatch as SignalWatch
from gflow.dynamics.interrupt import abandoned as abandoned
from gflow.dynamics.interrupt import call_interruptibly as call_interruptibly

# Optimizers and their runs
from gflow.dynamics.optimizers import OPTIMIZERS as OPTIMIZERS
from gflow.dynamics.optimizers import AbstractOptimizer as AbstractOptimizer
from gflow.dynamics.optimizers import Adam as Adam
from gflow.dynamics.optimizers import AdamW as AdamW
from gflow.dynamics.optimizers import Momentum as Momentum
from gflow.dynamics.optimizers import RMSProp as RMSProp
from gflow.dynamics.optimizers import SGD as SGD
from gflow.dynamics.optimizers import optimizer_named as optimizer_named
from gflow.dynamics.optimizer_run import StepClock as StepClock
from gflow.dynamics.optimizer_run import run_core as run_core
from gflow.dynamics.optimizer_run import run_optimizer as run_optimizer
from gflow.dynamics.minibatch import minibatch_segment as minibatch_segment
from gflow.dynamics.minibatch import run_minibatch as run_minibatch
from gflow.dynamics.minibatch import step_keys as step_keys

# Sweeps over step sizes
from gflow.dynamics.sweep import SweepRun as SweepRun
from gflow.dynamics.sweep import member_mesh as member_mesh
from gflow.dynamics.sweep import run_sweep as run_sweep
from gflow.dynamics.sweep import save_steps as save_steps

__all__ = [
    "AbstractOptimizer",
    "Adam",
    "AdamW",
    "FlatGradientField",
    "GradientField",
    "abandoned",
    "call_interruptibly",
    "Momentum",
    "OPTIMIZERS",
    "RMSProp",
    "SGD",
    "STATUSES",
    "SignalWatch",
    "Status",
    "StepClock",
    "SweepRun",
    "Trajectory",
    "evaluate_metrics",
    "warmup_cosine",
    "AbstractSchedule",
    "Constant",
    "WarmupCosine",
    "grad_evals_per_step",
    "gradient_norm",
    "member_mesh",
    "minibatch_segment",
    "optimizer_named",
    "parameter_distance",
    "references",
    "run_core",
    "run_minibatch",
    "run_optimizer",
    "run_sweep",
    "save_steps",
    "solve_flow",
    "solvers",
    "step_keys",
]
