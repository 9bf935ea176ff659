"""Reference trajectories that discrete optimizer runs are compared with."""
