"""``gflow report DIR``: one self-contained HTML page for a run or a sweep."""

from __future__ import annotations

import json

from gflow.cli.common import out_file, run_dir_arg
from gflow.cli.errors import UsageError


def register(sub) -> None:
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
    p.set_defaults(handler=run)


def run(args) -> int:
    from gflow.runs.report import write_report

    if not (args.run_dir / "config.json").is_file():
        raise UsageError(
            f"RUN_DIR: {args.run_dir} has no config.json; give a directory written by "
            "a gflow command"
        )
    try:
        cfg = json.loads((args.run_dir / "config.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        cfg = None
    if not isinstance(cfg, dict):
        raise UsageError(
            f"RUN_DIR: {args.run_dir}/config.json is not a gflow configuration (a JSON "
            "object); give a directory written by a gflow command"
        )
    if cfg.get("command") == "monitor":  # draw the figure from the files first
        from gflow.plotting.monitor import plot_monitor

        try:
            plot_monitor(args.run_dir)
        except ValueError as e:
            raise UsageError(f"RUN_DIR: {args.run_dir}: {e}") from e
    path = write_report(args.run_dir, args.out)
    print(f"report -> {path}")
    return 0
