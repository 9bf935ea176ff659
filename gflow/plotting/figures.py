"""The figures each command draws into its run directory."""

from __future__ import annotations

from pathlib import Path

from gflow.analysis.stages import Stage
from gflow.dynamics.trajectory import Trajectory
from gflow.plotting.figure import plt, save_figure
from gflow.plotting.flow import plot_flow
from gflow.plotting.heads import plot_attention_maps, plot_head_entropy
from gflow.plotting.paper import paper_figures
from gflow.plotting.stages import plot_stages
from gflow.plotting.sweep import plot_departures, plot_error_vs_lr, plot_trajectories
from gflow.runs.flow_run import FlowConfig
from gflow.runs.sweep_run import SweepConfig
from gflow.runs.train import TrainConfig, TrainData


def flow_figures(
    run_dir, cfg: FlowConfig, traj: Trajectory, stages: list[Stage]
) -> None:
    """flow.png (loss and observables), stages.png (the detected stages) and the
    paper's figures paper_*.png (``gflow.plotting.paper.paper_figures``)."""
    run_dir, chain = Path(run_dir), cfg.chain()
    refs = dict(unigram_loss=chain.unigram_loss, bayes_loss=chain.bayes_loss)
    plot_flow(
        traj,
        run_dir / "flow.png",
        title=f"population flow, ε={cfg.init_scale:g}",
        **refs,
    )
    plot_stages(
        traj,
        stages,
        run_dir / "stages.png",
        title=f"stages, ε={cfg.init_scale:g}",
        **refs,
    )
    paper_figures(run_dir, traj, stages, pi=chain.pi)


def sweep_figures(run_dir, cfg: SweepConfig, result: dict) -> None:
    """error_vs_lr.png, trajectories.png and departure.png of a sweep."""
    run_dir = Path(run_dir)
    title = f"{cfg.optimizer} vs {cfg.reference}"
    plot_error_vs_lr(result, run_dir / "error_vs_lr.png", title=title)
    plot_trajectories(result, run_dir / "trajectories.png", title=title)
    plot_departures(result, run_dir / "departure.png", title=title)


def train_figures(
    run_dir,
    cfg: TrainConfig,
    data: TrainData,
    traj: Trajectory,
    stages: list[Stage],
) -> None:
    """loss.png (held-out loss on the clock, with the unigram and Bayes losses),
    head_entropy.png (per head, stages shaded) and attention.png (the final model's
    heat maps on the first held-out context)."""
    run_dir = Path(run_dir)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(traj.t, traj.metrics["loss"], label=f"{cfg.optimizer} (held out)")
    for name, value in data.references.items():
        ax.axhline(value, ls="--", lw=0.8, color="grey")
        ax.annotate(name.replace("_", " "), (traj.t[0], value), fontsize=7)
    ax.set_xlabel("t = Σ η")
    ax.set_ylabel("loss")
    ax.set_title(f"{cfg.layers} layers × {cfg.heads} heads, {cfg.data}")
    ax.legend()
    save_figure(fig, run_dir / "loss.png")
    title = f"{cfg.optimizer}, lr {cfg.lr:g} ({cfg.schedule})"
    plot_head_entropy(traj, run_dir / "head_entropy.png", stages=stages, title=title)
    context = data.eval_tokens[0, :-1][: min(16, cfg.seq_len)]
    plot_attention_maps(traj.final, context, run_dir / "attention.png", title=title)
