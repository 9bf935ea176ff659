"""The figures each command draws into its run directory."""

from __future__ import annotations

from pathlib import Path

from gflow.analysis.stages import Stage
from gflow.dynamics.trajectory import Trajectory
from gflow.plotting.flow import plot_flow
from gflow.plotting.stages import plot_stages
from gflow.plotting.sweep import plot_departures, plot_error_vs_lr, plot_trajectories
from gflow.runs.flow_run import FlowConfig
from gflow.runs.sweep_run import SweepConfig


def flow_figures(
    run_dir, cfg: FlowConfig, traj: Trajectory, stages: list[Stage]
) -> None:
    """flow.png (loss and observables) and stages.png (the detected stages)."""
    run_dir, chain = Path(run_dir), cfg.chain()
    refs = dict(unigram_loss=chain.unigram_loss, bayes_loss=chain.bayes_loss)
    plot_flow(
        traj, run_dir / "flow.png", title=f"population flow, ε={cfg.init_scale:g}",
        **refs,
    )  # fmt: skip
    plot_stages(
        traj, stages, run_dir / "stages.png", title=f"stages, ε={cfg.init_scale:g}",
        **refs,
    )  # fmt: skip


def sweep_figures(run_dir, cfg: SweepConfig, result: dict) -> None:
    """error_vs_lr.png, trajectories.png and departure.png of a sweep."""
    run_dir = Path(run_dir)
    title = f"{cfg.optimizer} vs {cfg.reference}"
    plot_error_vs_lr(result, run_dir / "error_vs_lr.png", title=title)
    plot_trajectories(result, run_dir / "trajectories.png", title=title)
    plot_departures(result, run_dir / "departure.png", title=title)
