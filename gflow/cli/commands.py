"""The ``gflow`` sub-commands: each a job (``gflow.runs``) and its figures.

``JobCommand`` gives any job its parser (the options come from its configuration)
and runs it through the one driver (``gflow.cli.driver.execute``). Add a command by
writing its job and listing it here.
"""

from __future__ import annotations

from gflow.cli import report
from gflow.cli.driver import Figures, execute
from gflow.cli.options import add_options
from gflow.runs.compare_run import CompareJob
from gflow.runs.flow_run import FlowJob
from gflow.runs.job import AbstractJob
from gflow.runs.sweep_run import SweepJob
from gflow.runs.text import TextJob
from gflow.runs.train import TrainJob


class JobCommand:
    """A command that runs ``job`` and then draws ``figures(run_dir, result)``."""

    def __init__(self, job: AbstractJob, figures: Figures | None = None):
        self.job = job
        self.figures = figures

    def register(self, sub) -> None:
        p = sub.add_parser(
            self.job.command, help=self.job.help, description=self.job.description
        )
        add_options(p, self.job)
        p.set_defaults(handler=self.run)

    def run(self, args) -> int:
        return execute(self.job, args, self.figures)


def _flow_figures(run_dir, result) -> None:
    from gflow.plotting.figures import flow_figures  # matplotlib: only if drawn

    flow_figures(run_dir, result.cfg, result.trajectory, result.stages)


def _sweep_figures(run_dir, result) -> None:
    from gflow.plotting.figures import sweep_figures

    cfg, out = result
    sweep_figures(run_dir, cfg, out)


def _compare_figures(run_dir, result) -> None:
    from gflow.plotting.sweep import plot_comparison

    cfg = result.plan.cfg
    plot_comparison(
        result.comparison,
        result.optimizer,
        result.flow,
        run_dir / "compare.png",
        title=f"{cfg.optimizer} η={cfg.lr:g}",
    )


def _train_figures(run_dir, result) -> None:
    from gflow.plotting.figures import train_figures

    for name, (member, data, traj) in result.runs.items():
        folder = run_dir if result.one else run_dir / "figures" / name
        folder.mkdir(parents=True, exist_ok=True)
        train_figures(folder, member, data, traj, result.stages[name])


def _text_figures(run_dir, result) -> None:
    from gflow.plotting.text import plot_attention_rows, plot_text_summary

    cfg = result.plan.cfg
    if cfg.model == "attention":  # a Transformer has no attention rows
        for name in result.runs:
            plot_attention_rows(run_dir, name)
        plot_text_summary(run_dir, list(cfg.run_names(cfg.seed)))  # the first seed's


COMMANDS = [
    JobCommand(FlowJob(), _flow_figures),
    JobCommand(SweepJob(), _sweep_figures),
    JobCommand(CompareJob(), _compare_figures),
    JobCommand(TextJob(), _text_figures),
    JobCommand(TrainJob(), _train_figures),
    report,
]
