"""Every command's options, built from its configuration, and the one way they
become a configuration (fresh, from ``--config FILE``, or ``--resume RUN_DIR``).

A configuration field made with ``gflow.runs.setting(default, help)`` is an
option; nothing here lists a command's settings by hand. The options of the run
itself (``--out``, ``--resume``, ``--config``, ``--no-figures`` and, for a job that
splits, the process options) are the same for every command.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from gflow.cli.common import (
    UsageError,
    add_out_option,
    default_out,
    floats,
    run_dir_arg,
)
from gflow.cli.processes import add_process_options
from gflow.runs.config import AbstractConfig, ConfigError, Option
from gflow.runs.job import AbstractJob
from gflow.runs.run_dir import RunDirectory


def _argparse_type(opt: Option):
    """The option's argparse type: numbers and strings as argparse reads them,
    comma-separated numbers by ``floats``; a list of strings is read as one string
    and split by ``given``."""
    if opt.kind in (int, float, str):
        return opt.kind
    if opt.kind == tuple[float]:
        return floats
    if opt.kind == tuple[str]:
        return str
    return opt.parse


def _shown(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def add_options(parser, job: AbstractJob) -> None:
    """The options of ``job``'s configuration and of its run."""
    for opt in job.config_type.options():
        if opt.parse is None:
            parser.add_argument(
                *opt.flags,
                dest=opt.path,
                action="store_const",
                const=opt.const,
                default=None,
                help=opt.help,
            )
        else:
            parser.add_argument(
                *opt.flags,
                dest=opt.path,
                type=_argparse_type(opt),
                choices=opt.choices,
                metavar=None
                if opt.choices
                else opt.flag.lstrip("-").replace("-", "_").upper(),
                default=None,
                help=f"{opt.help} (default {_shown(opt.default)})",
            )
    add_out_option(parser, job.command)
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="JSON file of settings (a run's config.json works); options override it",
    )
    parser.add_argument(
        "--resume",
        type=run_dir_arg,
        default=None,
        metavar="RUN_DIR",
        help="continue an interrupted run as configured in RUN_DIR/config.json",
    )
    parser.add_argument(
        "--no-figures",
        action="store_true",
        help="write the run's data only, no PNG figures",
    )
    if job.splits:
        add_process_options(parser)


def given(args, job: AbstractJob) -> list[tuple[Option, Any]]:
    """The options given and their values."""
    out = []
    for opt in job.config_type.options():
        value = getattr(args, opt.path, None)
        if isinstance(value, str) and opt.kind == tuple[str]:
            value = opt.parse(value)  # a list of strings, given as one
        if value is not None:
            out.append((opt, value))
    return out


def load_config_file(
    path: Path, cls: type[AbstractConfig], option: str = "--config"
) -> dict:
    """The settings of a JSON file of ``cls`` fields (a run's config.json works as
    well), checked for unknown keys and JSON types; UsageError naming ``option``,
    the file and the fix. (Values of the right type are the configuration's to
    validate.)"""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        why = getattr(e, "strerror", None) or "not a UTF-8 text file"
        raise UsageError(
            f"{option}: cannot read config file {path}: {why}; give a JSON file"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(
            f"{option}: config file {path} is not valid JSON (line {e.lineno}, column "
            f"{e.colno}: {e.msg}); fix the file or pass the settings as options"
        ) from None
    if isinstance(data, dict) and isinstance(data.get("config"), dict):
        data = cls.document_settings(data)  # a run's config.json
    try:
        cls.check_json(data, f"{option}: config file {path}")
    except ConfigError as e:
        raise UsageError(str(e)) from None
    return data


@dataclasses.dataclass(frozen=True)
class Request:
    """What the command line asks of a job: the configuration, the run directory,
    whether it continues a run there, and which settings the user chose."""

    cfg: AbstractConfig
    out: Path
    resumed: bool
    chosen: frozenset[str]


def resolve(job: AbstractJob, args) -> Request:
    """The configuration and run directory of ``job`` from ``args``.

    Fresh: the defaults, then ``--config FILE``, then the options. ``--resume
    RUN_DIR``: the run's saved configuration; an option that would change it is
    refused in one line that names it (an option equal to the saved value is
    fine), and the run continues bit for bit.
    """
    options = given(args, job)
    paths = {opt.path: value for opt, value in options}
    job.config_type.check_given(set(paths))
    if args.resume is not None:
        if args.config is not None:
            raise UsageError("give --resume or --config, not both")
        directory = RunDirectory(args.resume)
        saved = directory.read_config(job.config_type, job.command, "--resume")
        changed = [o for o, v in options if saved.setting_at(o.path) != v]
        drop = [o.flag for o in changed]
        if args.out is not None and Path(args.out) != Path(args.resume):
            drop.append("--out")  # a resumed run stays in its directory
        if drop:
            had = ", ".join(
                f"{o.path} = {_shown(saved.setting_at(o.path))}" for o in changed
            )
            raise UsageError(
                f"--resume continues a run as configured; drop {', '.join(drop)}"
                + (f" (the run has {had})" if had else "")
            )
        return Request(
            job.resume(saved, directory), Path(args.resume), True, frozenset(paths)
        )
    base = {} if args.config is None else load_config_file(args.config, job.config_type)
    try:
        cfg = job.config_type.with_options(base, paths)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    out = Path(args.out) if args.out is not None else default_out(job.command)
    return Request(cfg, out, False, frozenset(paths) | frozenset(base))
