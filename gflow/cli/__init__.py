"""The command line: the one place where strings become objects."""

from gflow.cli.main import build_parser as build_parser
from gflow.cli.main import main as main
