"""``gflow report DIR``: one self-contained HTML page for a run or a sweep."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser(
        "report",
        help="write report.html for a run directory (figures embedded)",
        description="Write one self-contained HTML page: the configuration, the "
        "statuses and solver statistics, the stage table and every figure.",
    )
    p.add_argument("run_dir", type=Path, help="a directory written by a gflow command")
    p.add_argument(
        "--out", type=Path, default=None, help="default: RUN_DIR/report.html"
    )
    p.set_defaults(handler=run)


def run(args) -> int:
    from ..report import write_report

    path = write_report(args.run_dir, args.out)
    print(f"report -> {path}")
    return 0
