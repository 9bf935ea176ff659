"""gflow: gradient-flow simulator for the training dynamics of attention."""

from .data import MarkovChain, stationary_distribution
from .flow import GradientField, solve_flow
from .io import load_run, load_trajectory, save_trajectory
from .losses import (
    PopulationLoss,
    SequenceLoss,
    population_attention,
    population_logits,
    population_loss,
    sequence_loss,
)
from .model import AttentionModel
from .observables import (
    MarkovObservables,
    attention_entropy,
    entropy,
    evaluate_metrics,
    gradient_norm,
    singular_values,
)
from .optim import run_optimizer
from .trajectory import Trajectory, parameter_distance

__version__ = "0.1.0"

__all__ = [
    "AttentionModel",
    "GradientField",
    "MarkovChain",
    "MarkovObservables",
    "PopulationLoss",
    "SequenceLoss",
    "Trajectory",
    "attention_entropy",
    "entropy",
    "evaluate_metrics",
    "gradient_norm",
    "load_run",
    "load_trajectory",
    "parameter_distance",
    "population_attention",
    "population_logits",
    "population_loss",
    "run_optimizer",
    "save_trajectory",
    "sequence_loss",
    "singular_values",
    "solve_flow",
    "stationary_distribution",
]

# Issue 3: stage observables and stage detection.
from .diagnostics import StageObservables, effective_rank, token_coordinates  # noqa: E402
from .stages import Stage, detect_stages  # noqa: E402

__all__ += [
    "Stage",
    "StageObservables",
    "detect_stages",
    "effective_rank",
    "token_coordinates",
]

# issue 4: flow versus optimizers (comparisons, learning-rate sweeps, references)
from .compare import compare, departure_time, fit_order  # noqa: E402
from .optimizer_odes import AdamODEReference, MomentumODEReference  # noqa: E402
from .references import FlowReference, ModifiedFlowReference, ModifiedLoss  # noqa: E402
from .sharpness import predicted_departure, sharpness_along  # noqa: E402
from .sweep import compare_sweep, member_mesh, run_sweep  # noqa: E402

__all__ += [
    "AdamODEReference",
    "FlowReference",
    "ModifiedFlowReference",
    "ModifiedLoss",
    "MomentumODEReference",
    "compare",
    "compare_sweep",
    "departure_time",
    "fit_order",
    "member_mesh",
    "predicted_departure",
    "run_sweep",
    "sharpness_along",
]

# Issue 6: natural text (corpora, tokenisers, windows, text observables).
from .text import (  # noqa: E402
    PositionalAttentionModel,
    TextLoss,
    TextObservables,
    Vocabulary,
    WindowStream,
    fixed_sample,
    load_corpus,
)

__all__ += [
    "PositionalAttentionModel",
    "TextLoss",
    "TextObservables",
    "Vocabulary",
    "WindowStream",
    "fixed_sample",
    "load_corpus",
]
