"""Configured, saved and resumable runs: every command as a job over one run
directory format, checkpoints, ``load_run`` and the HTML report.

``gflow train`` and ``gflow text`` are the sub-packages ``gflow.runs.train`` and
``gflow.runs.text``."""

# Files: atomic writes, JSON, trajectories on disk.
from gflow.runs.files import atomic_write_bytes as atomic_write_bytes
from gflow.runs.files import complete_lines as complete_lines
from gflow.runs.files import read_json as read_json
from gflow.runs.files import read_jsonl as read_jsonl
from gflow.runs.files import write_json as write_json
from gflow.runs.trajectory_files import load_trajectory as load_trajectory
from gflow.runs.trajectory_files import save_trajectory as save_trajectory
from gflow.runs.environment import environment as environment

# Configs and the name tables their options are checked against.
from gflow.runs.config import AbstractConfig as AbstractConfig
from gflow.runs.config import ConfigError as ConfigError
from gflow.runs.config import Option as Option
from gflow.runs.config import setting as setting
from gflow.runs.names import DATASETS as DATASETS
from gflow.runs.names import METHODS as METHODS
from gflow.runs.names import MODELS as MODELS
from gflow.runs.names import NAMES as NAMES
from gflow.runs.names import OPTIMIZERS as OPTIMIZERS
from gflow.runs.names import REFERENCES as REFERENCES
from gflow.runs.names import SCHEDULES as SCHEDULES
from gflow.runs.names import SOLVERS as SOLVERS
from gflow.runs.config import NO_ERROR_ESTIMATE as NO_ERROR_ESTIMATE
from gflow.runs.names import TOKENIZERS as TOKENIZERS
from gflow.runs.names import TRAINING as TRAINING
from gflow.runs.names import NameTable as NameTable

# Checkpoints: fingerprinted, verified pieces; resumable flows and sweeps.
from gflow.runs.checkpoint import PieceStore as PieceStore
from gflow.runs.checkpoint import fingerprint as fingerprint
from gflow.runs.checkpoint import run_pieces as run_pieces
from gflow.runs.resumable_flow import solve_flow_resumable as solve_flow_resumable
from gflow.runs.resumable_sweep import chunk_path as chunk_path
from gflow.runs.resumable_sweep import run_sweep_resumable as run_sweep_resumable

# Several processes, and the traced-program cache.
from gflow.runs.distributed import Processes as Processes
from gflow.runs.distributed import assign as assign
from gflow.runs.distributed import deal as deal
from gflow.runs.program_cache import ProgramCache as ProgramCache
from gflow.runs.program_cache import describe as describe

# Where a run's names become objects, once.
from gflow.runs.strategies import Strategies as Strategies

# Jobs over run directories.
from gflow.runs.run_dir import Run as Run
from gflow.runs.run_dir import RunDocument as RunDocument
from gflow.runs.run_dir import RunFacts as RunFacts
from gflow.runs.run_dir import RunDirectory as RunDirectory
from gflow.runs.job import AbstractJob as AbstractJob
from gflow.runs.job import Context as Context
from gflow.runs.job import Member as Member
from gflow.runs.job import MembersResult as MembersResult
from gflow.runs.job import Units as Units
from gflow.runs.stages import StagesEntry as StagesEntry

# gflow flow and gflow sweep.
from gflow.runs.flow_run import FlowConfig as FlowConfig
from gflow.runs.flow_run import run_flow as run_flow
from gflow.runs.sweep_run import SweepConfig as SweepConfig
from gflow.runs.sweep_run import SweepJob as SweepJob
from gflow.runs.sweep_run import check_reference as check_reference
from gflow.runs.sweep_run import reference_of as reference_of

# Reading runs back, and the report.
from gflow.runs.load import load_run as load_run
from gflow.runs.report import render_report as render_report
from gflow.runs.report import write_report as write_report

# gflow train and gflow text (their modules import the ones above).
from gflow.runs import text as text
from gflow.runs import train as train

__all__ = [
    "DATASETS",
    "METHODS",
    "MODELS",
    "OPTIMIZERS",
    "TOKENIZERS",
    "TRAINING",
    "NAMES",
    "REFERENCES",
    "SCHEDULES",
    "SOLVERS",
    "NO_ERROR_ESTIMATE",
    "AbstractConfig",
    "AbstractJob",
    "ConfigError",
    "Context",
    "FlowConfig",
    "Member",
    "MembersResult",
    "NameTable",
    "Option",
    "PieceStore",
    "Processes",
    "ProgramCache",
    "Run",
    "RunDocument",
    "RunFacts",
    "RunDirectory",
    "SweepConfig",
    "StagesEntry",
    "Strategies",
    "SweepJob",
    "Units",
    "assign",
    "atomic_write_bytes",
    "check_reference",
    "chunk_path",
    "complete_lines",
    "deal",
    "describe",
    "environment",
    "fingerprint",
    "load_run",
    "load_trajectory",
    "read_json",
    "read_jsonl",
    "reference_of",
    "render_report",
    "run_flow",
    "run_pieces",
    "run_sweep_resumable",
    "save_trajectory",
    "setting",
    "solve_flow_resumable",
    "text",
    "train",
    "write_json",
    "write_report",
]
