"""``gflow text``: natural text, the flow (or small-step GD) and a practical
optimizer from one init, over seeds, resumable, over several processes."""

from gflow.runs.text.config import MODELS as MODELS
from gflow.runs.text.config import OPTIMIZER_NAMES as OPTIMIZER_NAMES
from gflow.runs.text.config import PAPER_QUERIES as PAPER_QUERIES
from gflow.runs.text.config import TOKENIZER_NAMES as TOKENIZER_NAMES
from gflow.runs.text.config import TextConfig as TextConfig
from gflow.runs.text.job import write_text_run as write_text_run
from gflow.runs.text.job import write_text_start as write_text_start
from gflow.runs.text.job import TextJob as TextJob
from gflow.runs.text.run import RunPieces as RunPieces
from gflow.runs.text.run import text_fingerprint as text_fingerprint
from gflow.runs.text.run import TextData as TextData
from gflow.runs.text.run import init_model as init_model
from gflow.runs.text.run import prepare as prepare
from gflow.runs.text.run import run_text as run_text
from gflow.runs.stages import SeedSummary as SeedSummary
from gflow.runs.strategies import text_strategies as text_strategies
from gflow.runs.stages import stages_table as stages_table
from gflow.runs.stages import summarise_seeds as summarise_seeds

__all__ = [
    "MODELS",
    "OPTIMIZER_NAMES",
    "TOKENIZER_NAMES",
    "RunPieces",
    "SeedSummary",
    "TextConfig",
    "TextJob",
    "init_model",
    "prepare",
    "run_text",
    "stages_table",
    "summarise_seeds",
    "text_fingerprint",
    "text_strategies",
    "write_text_run",
    "write_text_start",
]
