"""gflow: gradient-flow simulator for the training dynamics of attention.

Public names are re-exported here, grouped by layer; each layer imports only the
layers listed before it (the contract is in pyproject.toml).
"""

import importlib.metadata

# Problems: what is learned (models, Markov data, losses).
from gflow.problems.markov import MarkovChain as MarkovChain
from gflow.problems.markov import MarkovStream as MarkovStream
from gflow.problems.markov import stationary_distribution as stationary_distribution
from gflow.problems.model import AttentionModel as AttentionModel
from gflow.problems.transformer import Transformer as Transformer
from gflow.problems.icl_markov import InContextMarkov as InContextMarkov
from gflow.problems.losses import PopulationLoss as PopulationLoss
from gflow.problems.losses import SequenceLoss as SequenceLoss
from gflow.problems.losses import population_attention as population_attention
from gflow.problems.losses import population_logits as population_logits
from gflow.problems.losses import population_loss as population_loss
from gflow.problems.losses import sequence_loss as sequence_loss

# Dynamics: how it moves (flows, optimizers on the shared clock, references, sweeps).
from gflow.dynamics import solvers as solvers
from gflow.dynamics.trajectory import STATUSES as STATUSES
from gflow.dynamics.trajectory import Status as Status
from gflow.dynamics.trajectory import Trajectory as Trajectory
from gflow.dynamics.trajectory import parameter_distance as parameter_distance
from gflow.dynamics.metrics import evaluate_metrics as evaluate_metrics
from gflow.dynamics.metrics import gradient_norm as gradient_norm
from gflow.dynamics.flow import GradientField as GradientField
from gflow.dynamics.flow import solve_flow as solve_flow
from gflow.dynamics.optimizers import OPTIMIZERS as OPTIMIZERS
from gflow.dynamics.optimizers import AbstractOptimizer as AbstractOptimizer
from gflow.dynamics.optimizers import SGD as SGD
from gflow.dynamics.optimizers import Momentum as Momentum
from gflow.dynamics.optimizers import Adam as Adam
from gflow.dynamics.optimizers import AdamW as AdamW
from gflow.dynamics.optimizers import RMSProp as RMSProp
from gflow.dynamics.optimizers import optimizer_named as optimizer_named
from gflow.dynamics.optimizer_run import run_optimizer as run_optimizer
from gflow.dynamics.minibatch import run_minibatch as run_minibatch
from gflow.dynamics.references.base import AbstractReference as AbstractReference
from gflow.dynamics.references.flow import FlowReference as FlowReference
from gflow.dynamics.references.flow import (
    ModifiedFlowReference as ModifiedFlowReference,
)
from gflow.dynamics.references.flow import ModifiedLoss as ModifiedLoss
from gflow.dynamics.references.central import (
    CentralFlowReference as CentralFlowReference,
)
from gflow.dynamics.references.central_adaptive import (
    AdamCentralFlowReference as AdamCentralFlowReference,
)
from gflow.dynamics.references.central_adaptive import (
    MomentumCentralFlowReference as MomentumCentralFlowReference,
)
from gflow.dynamics.references.central_adaptive import (
    RMSPropCentralFlowReference as RMSPropCentralFlowReference,
)
from gflow.dynamics.references.central_adaptive import (
    central_flow_of as central_flow_of,
)
from gflow.dynamics.references.optimizer_odes import (
    AdamODEReference as AdamODEReference,
)
from gflow.dynamics.references.optimizer_odes import (
    MomentumODEReference as MomentumODEReference,
)
from gflow.dynamics.sweep import SweepRun as SweepRun
from gflow.dynamics.sweep import member_mesh as member_mesh
from gflow.dynamics.sweep import run_sweep as run_sweep

# Analysis: what it means (observables, stages, comparisons, sharpness).
from gflow.analysis.observables import MarkovObservables as MarkovObservables
from gflow.analysis.observables import attention_entropy as attention_entropy
from gflow.analysis.observables import entropy as entropy
from gflow.analysis.observables import singular_values as singular_values
from gflow.analysis.stage_observables import StageObservables as StageObservables
from gflow.analysis.stage_observables import effective_rank as effective_rank
from gflow.analysis.stage_observables import token_coordinates as token_coordinates
from gflow.analysis.stage import Stage as Stage
from gflow.analysis.stages import StageDetector as StageDetector
from gflow.analysis.stages import detect_stages as detect_stages
from gflow.analysis.head_observables import HeadObservables as HeadObservables
from gflow.analysis.head_stages import HeadStage as HeadStage
from gflow.analysis.head_stages import detect_head_stages as detect_head_stages
from gflow.analysis.attending import Attending as Attending
from gflow.analysis.online_stages import OnlineStageDetector as OnlineStageDetector
from gflow.analysis.compare import compare as compare
from gflow.analysis.compare import departure_time as departure_time
from gflow.analysis.compare import fit_order as fit_order
from gflow.analysis.sweep_compare import compare_sweep as compare_sweep
from gflow.analysis.sharpness import predicted_departure as predicted_departure
from gflow.analysis.sharpness import sharpness_along as sharpness_along
from gflow.analysis.saddle import saddle_rate as saddle_rate
from gflow.analysis.saddle import unigram_saddle as unigram_saddle

# Text: corpora, tokenisers, windows, text observables (a vertical slice).
from gflow import text as text
from gflow.text import PositionalAttentionModel as PositionalAttentionModel
from gflow.text import TextLoss as TextLoss
from gflow.text import TextObservables as TextObservables
from gflow.text import Vocabulary as Vocabulary
from gflow.text import WindowStream as WindowStream
from gflow.text import corpus_path as corpus_path
from gflow.text import fixed_sample as fixed_sample
from gflow.text import load_corpus as load_corpus

# Runs: configured, saved, resumable runs and their directories.
from gflow.runs.trajectory_files import load_trajectory as load_trajectory
from gflow.runs.trajectory_files import save_trajectory as save_trajectory
from gflow.runs.load import load_run as load_run
from gflow.runs.resumable_flow import solve_flow_resumable as solve_flow_resumable
from gflow.runs.resumable_sweep import run_sweep_resumable as run_sweep_resumable
from gflow.runs.report import write_report as write_report
from gflow.runs.program_cache import ProgramCache as ProgramCache

# Monitor: the stages detected online in anyone's training loop.
from gflow.monitor.monitor import Monitor as Monitor
from gflow.monitor.logs import load_monitor as load_monitor
from gflow.monitor.reduce import attention_signals as attention_signals
from gflow.monitor.probe import Probe as Probe

__version__ = importlib.metadata.version("gflow")

__all__ = [
    "AbstractOptimizer",
    "AbstractReference",
    "Adam",
    "AdamCentralFlowReference",
    "AdamODEReference",
    "AdamW",
    "Attending",
    "AttentionModel",
    "FlowReference",
    "GradientField",
    "HeadObservables",
    "HeadStage",
    "InContextMarkov",
    "MarkovChain",
    "MarkovObservables",
    "MarkovStream",
    "ModifiedFlowReference",
    "ModifiedLoss",
    "CentralFlowReference",
    "Momentum",
    "MomentumCentralFlowReference",
    "MomentumODEReference",
    "Monitor",
    "Probe",
    "OPTIMIZERS",
    "OnlineStageDetector",
    "PopulationLoss",
    "PositionalAttentionModel",
    "ProgramCache",
    "RMSProp",
    "RMSPropCentralFlowReference",
    "SGD",
    "STATUSES",
    "SequenceLoss",
    "Stage",
    "StageDetector",
    "StageObservables",
    "Status",
    "SweepRun",
    "TextLoss",
    "TextObservables",
    "Trajectory",
    "Transformer",
    "Vocabulary",
    "WindowStream",
    "attention_entropy",
    "attention_signals",
    "central_flow_of",
    "compare",
    "compare_sweep",
    "departure_time",
    "detect_head_stages",
    "detect_stages",
    "effective_rank",
    "entropy",
    "corpus_path",
    "evaluate_metrics",
    "fit_order",
    "fixed_sample",
    "gradient_norm",
    "load_corpus",
    "load_monitor",
    "load_run",
    "load_trajectory",
    "member_mesh",
    "optimizer_named",
    "parameter_distance",
    "population_attention",
    "population_logits",
    "population_loss",
    "predicted_departure",
    "run_minibatch",
    "run_optimizer",
    "run_sweep",
    "run_sweep_resumable",
    "save_trajectory",
    "saddle_rate",
    "sequence_loss",
    "sharpness_along",
    "singular_values",
    "solve_flow",
    "solve_flow_resumable",
    "solvers",
    "stationary_distribution",
    "text",
    "token_coordinates",
    "unigram_saddle",
    "write_report",
]
