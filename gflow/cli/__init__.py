"""The command line: the one place where strings become objects."""

# The entry point and its parser.
from gflow.cli.main import build_parser as build_parser
from gflow.cli.main import main as main

# Refusals: a bad command line or config file, said in one line (exit status 2).
from gflow.cli.common import UsageError as UsageError

# Option types, config files and the options a job is run with.
from gflow.cli.common import floats as floats
from gflow.cli.options import load_config_file as load_config_file
from gflow.cli.common import out_dir as out_dir
from gflow.cli.common import out_file as out_file
from gflow.cli.common import run_dir_arg as run_dir_arg
from gflow.cli.options import resolve as resolve

# Several processes: the coordinator's address, a free local port.
from gflow.cli.processes import free_port as free_port
from gflow.cli.processes import coordinator_address as coordinator_address

# The persistent compilation cache: its folder, and switching it on.
from gflow.cli.compile_cache import cache_dir as cache_dir
from gflow.cli.compile_cache import configure as configure

__all__ = [
    "UsageError",
    "build_parser",
    "cache_dir",
    "configure",
    "coordinator_address",
    "floats",
    "free_port",
    "load_config_file",
    "main",
    "out_dir",
    "out_file",
    "resolve",
    "run_dir_arg",
]
