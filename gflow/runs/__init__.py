"""Configured, saved and resumable runs: every command as a job over one run
directory format, checkpoints, ``load_run`` and the HTML report."""

from gflow.runs.checkpoint import PieceStore as PieceStore
from gflow.runs.checkpoint import fingerprint as fingerprint
from gflow.runs.checkpoint import run_pieces as run_pieces
from gflow.runs.config import AbstractConfig as AbstractConfig
from gflow.runs.config import ConfigError as ConfigError
from gflow.runs.config import Option as Option
from gflow.runs.config import setting as setting
from gflow.runs.job import AbstractJob as AbstractJob
from gflow.runs.job import Context as Context
from gflow.runs.job import Units as Units
from gflow.runs.names import NAMES as NAMES
from gflow.runs.names import NameTable as NameTable
from gflow.runs.run_dir import Run as Run
from gflow.runs.run_dir import RunDirectory as RunDirectory
