"""Reference trajectories that discrete optimizer runs are compared with.

Public names: the abstract ``AbstractReference`` and its helpers; the flow and
the modified flow; the central flows of GD and of preconditioned optimizers; the
momentum and Adam ODEs.
"""

# The strategy
from gflow.dynamics.references.base import AbstractReference as AbstractReference
from gflow.dynamics.references.base import at_times as at_times
from gflow.dynamics.references.base import evaluate_along as evaluate_along
from gflow.dynamics.references.base import union_times as union_times

# Flow and modified flow
from gflow.dynamics.references.flow import FlowReference as FlowReference
from gflow.dynamics.references.flow import (
    ModifiedFlowReference as ModifiedFlowReference,
)
from gflow.dynamics.references.flow import ModifiedLoss as ModifiedLoss

# Central flows
from gflow.dynamics.references.central import (
    CentralFlowReference as CentralFlowReference,
)
from gflow.dynamics.references.central import (
    solve_complementarity as solve_complementarity,
)
from gflow.dynamics.references.central import central_velocity as central_velocity
from gflow.dynamics.references.central import third_derivatives as third_derivatives
from gflow.dynamics.references.central import top_eigenpairs as top_eigenpairs
from gflow.dynamics.references.central_adaptive import (
    AdamCentralFlowReference as AdamCentralFlowReference,
)
from gflow.dynamics.references.central_adaptive import (
    MomentumCentralFlowReference as MomentumCentralFlowReference,
)
from gflow.dynamics.references.central_adaptive import (
    RMSPropCentralFlowReference as RMSPropCentralFlowReference,
)
from gflow.dynamics.references.central_adaptive import (
    central_flow_of as central_flow_of,
)

# Optimizer ODEs
from gflow.dynamics.references.optimizer_odes import (
    AdamODEReference as AdamODEReference,
)
from gflow.dynamics.references.optimizer_odes import (
    MomentumODEReference as MomentumODEReference,
)

__all__ = [
    "AbstractReference",
    "AdamCentralFlowReference",
    "AdamODEReference",
    "CentralFlowReference",
    "FlowReference",
    "ModifiedFlowReference",
    "ModifiedLoss",
    "MomentumCentralFlowReference",
    "MomentumODEReference",
    "RMSPropCentralFlowReference",
    "at_times",
    "central_flow_of",
    "evaluate_along",
    "solve_complementarity",
    "central_velocity",
    "third_derivatives",
    "top_eigenpairs",
    "union_times",
]
