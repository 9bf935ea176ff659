"""The ``gflow`` sub-commands: each a job (``gflow.runs``) and its figures, and
``gflow report``.

``JobCommand`` gives any job its parser (the options come from its configuration)
and runs it through the one driver (``gflow.cli.driver.execute``). Add a command by
writing its job and listing it here.
"""

from __future__ import annotations

from gflow.cli.common import UsageError, out_file, run_dir_arg
from gflow.cli.driver import Figures, execute
from gflow.cli.options import add_options
from gflow.runs.compare_run import CompareJob
from gflow.runs.flow_run import FlowJob
from gflow.runs.job import AbstractJob
from gflow.runs.run_dir import RunDirectory
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

    flow_figures(run_dir, result.cfg, result.trajectory, list(result.stages))


def _sweep_figures(run_dir, result) -> None:
    from gflow.plotting.figures import sweep_figures

    sweep_figures(run_dir, result.cfg, result.comparison)


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

    one = not result.plan.cfg.sweep.is_sweep  # the layout of one run
    for m in result.runs:
        folder = run_dir if one else run_dir / "figures" / m.name
        folder.mkdir(parents=True, exist_ok=True)
        train_figures(folder, m.cfg, m.data, m.trajectory, list(m.stages.stages))


def _text_figures(run_dir, result) -> None:
    from gflow.plotting.text import plot_attention_rows, plot_text_summary

    cfg = result.plan.cfg
    if cfg.model == "attention":  # a Transformer has no attention rows
        for m in result.runs:
            plot_attention_rows(run_dir, m.name)
        plot_text_summary(run_dir, list(cfg.run_names(cfg.seed)))  # the first seed's


class ReportCommand:
    """``gflow report DIR``: one self-contained HTML page for a run or a sweep."""

    def register(self, sub) -> None:
        p = sub.add_parser(
            "report",
            help="write report.html for a run or monitor directory (figures embedded)",
            description="Write one self-contained HTML page: the configuration, the "
            "statuses and solver statistics, the stage table and every figure. For a "
            "gflow.Monitor directory it first draws monitor.png (per-head entropy over "
            "time with the events marked) and lists the events.",
        )
        p.add_argument(
            "run_dir", type=run_dir_arg, help="a directory written by a gflow command"
        )
        p.add_argument(
            "--out", type=out_file, default=None, help="default: RUN_DIR/report.html"
        )
        p.set_defaults(handler=self.run)

    def run(self, args) -> int:
        from gflow.runs.report import write_report

        # ConfigError, one line, for a directory without a readable config.json
        doc = RunDirectory(args.run_dir).read("RUN_DIR")
        if doc.command == "monitor":  # draw the figure from the files first
            from gflow.plotting.monitor import plot_monitor

            try:
                plot_monitor(args.run_dir)
            except ValueError as e:
                raise UsageError(f"RUN_DIR: {args.run_dir}: {e}") from e
        path = write_report(args.run_dir, args.out)
        print(f"report -> {path}")
        return 0


COMMANDS = [
    JobCommand(FlowJob(), _flow_figures),
    JobCommand(SweepJob(), _sweep_figures),
    JobCommand(CompareJob(), _compare_figures),
    JobCommand(TextJob(), _text_figures),
    JobCommand(TrainJob(), _train_figures),
    ReportCommand(),
]
