"""The figures each command draws into its run directory."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from gflow.analysis.stages import Stage
from gflow.dynamics.trajectory import Trajectory
from gflow.plotting.figure import plt, save_figure
from gflow.plotting.flow import plot_flow
from gflow.plotting.heads import plot_attention_maps, plot_head_entropy
from gflow.plotting.paper import paper_figures
from gflow.plotting.stages import plot_stages
from gflow.plotting.style import (
    DOC_WIDTH,
    STEP_CLOCK,
    figure_settings,
    outside_legend,
    settings_line,
    styled,
    time_axis,
)
from gflow.plotting.sweep import plot_departures, plot_error_vs_lr, plot_trajectories
from gflow.runs.flow_run import FlowConfig
from gflow.runs.sweep_run import SweepConfig
from gflow.runs.train import TrainConfig, TrainData


def _flow_settings(cfg: FlowConfig) -> str:
    pi = ", ".join(f"{p:g}" for p in np.asarray(cfg.chain().pi))
    return (
        f"π = ({pi}) · λ = {cfg.lam:g} · ε = {cfg.init_scale:g} · m = {cfg.d_model}"
        f" · seed {cfg.seed} · solver {cfg.solver}, rtol {cfg.rtol:g}"
    )


def flow_figures(
    run_dir, cfg: FlowConfig, traj: Trajectory, stages: list[Stage]
) -> None:
    """flow.png (loss and observables), stages.png (the detected stages) and the
    paper's figures paper_*.png (``gflow.plotting.paper.paper_figures``), each
    with the run's settings (π, λ, ε, m, seed, solver) as its footer."""
    run_dir, chain = Path(run_dir), cfg.chain()
    refs = dict(unigram_loss=chain.unigram_loss, bayes_loss=chain.bayes_loss)
    with figure_settings(_flow_settings(cfg)):
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


def sweep_figures(run_dir, cfg: SweepConfig, result: Mapping) -> None:
    """error_vs_lr.png, trajectories.png and departure.png of a sweep."""
    run_dir = Path(run_dir)
    title = f"{cfg.optimizer} vs {cfg.reference}"
    lrs = ", ".join(f"{lr:g}" for lr in cfg.lrs)
    with figure_settings(f"{title} · η ∈ {{{lrs}}} · threshold {cfg.threshold:g}"):
        plot_error_vs_lr(result, run_dir / "error_vs_lr.png", title=title)
        plot_trajectories(result, run_dir / "trajectories.png", title=title)
        plot_departures(result, run_dir / "departure.png", title=title)


@styled
def _loss_figure(path, cfg: TrainConfig, data: TrainData, traj: Trajectory) -> None:
    fig, ax = plt.subplots(figsize=(DOC_WIDTH, 3.4))
    ax.plot(
        traj.t, traj.metrics["loss"], color="k", label=f"{cfg.optimizer} (held out)"
    )
    for k, (name, value) in enumerate(data.references.items()):
        ax.axhline(value, ls="--", lw=0.9, color=f"C{k}", label=name.replace("_", " "))
    time_axis(ax, traj.t, label=STEP_CLOCK)
    ax.set_ylabel("loss (nats)")
    ax.set_title(f"{cfg.layers} layers × {cfg.heads} heads, {cfg.data}", loc="left")
    outside_legend(ax)
    settings_line(fig)
    save_figure(fig, path)


def train_figures(
    run_dir,
    cfg: TrainConfig,
    data: TrainData,
    traj: Trajectory,
    stages: list[Stage],
) -> None:
    """loss.png (held-out loss on the clock t = Σ η, with the unigram and Bayes
    losses), head_entropy.png (per head, stages in lanes, the same clock) and
    attention.png (the final model's heat maps on the first held-out context)."""
    run_dir = Path(run_dir)
    title = f"{cfg.label}, lr {cfg.lr:g} ({cfg.schedule})"
    settings = (
        f"{title} · {cfg.layers} layers × {cfg.heads} heads · {cfg.data}"
        f" · seed {cfg.seed}"
    )
    # an optimizer's clock, whatever the trajectory's info says
    traj = dataclasses.replace(traj, info={**traj.info, "kind": "train"})
    with figure_settings(settings):
        _loss_figure(run_dir / "loss.png", cfg, data, traj)
        plot_head_entropy(
            traj, run_dir / "head_entropy.png", stages=stages, title=title
        )
        context = data.eval_tokens[0, :-1][: min(16, cfg.seq_len)]
        plot_attention_maps(traj.final, context, run_dir / "attention.png", title=title)
