"""What the dynamics mean: observables, stage detection, critical points, Hessians,
sharpness and comparisons of runs."""
