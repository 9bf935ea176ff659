"""How parameters move: gradient flows, optimizer runs on the shared clock t = Σ η,
solvers, reference flows and learning-rate sweeps."""

from gflow.dynamics import solvers as solvers
