"""What the dynamics mean: observables, stage detection, critical points, Hessians,
sharpness and comparisons of runs.

Public names, by concept: observables recorded along runs; stage detection
(offline, per head, online); Hessians, critical points and the saddle; sharpness
and the comparison of runs with their references.
"""

# Observables
from gflow.analysis.observables import MarkovObservables as MarkovObservables
from gflow.analysis.observables import attention_entropy as attention_entropy
from gflow.analysis.observables import entropy as entropy
from gflow.analysis.observables import singular_values as singular_values
from gflow.analysis.stage_observables import StageObservables as StageObservables
from gflow.analysis.stage_observables import align_signs as align_signs
from gflow.analysis.stage_observables import cosine as cosine
from gflow.analysis.stage_observables import effective_rank as effective_rank
from gflow.analysis.stage_observables import sequence_attention as sequence_attention
from gflow.analysis.stage_observables import token_coordinates as token_coordinates
from gflow.analysis.head_observables import HeadObservables as HeadObservables
from gflow.analysis.head_observables import (
    head_attention_entropy as head_attention_entropy,
)
from gflow.analysis.attending import Attending as Attending
from gflow.analysis.attending import attention_rows as attention_rows
from gflow.analysis.key_classes import DIFFUSE as DIFFUSE
from gflow.analysis.key_classes import KEY_CLASSES as KEY_CLASSES
from gflow.analysis.key_classes import class_masks as class_masks
from gflow.analysis.key_classes import key_excess as key_excess
from gflow.analysis.key_classes import moved_onto as moved_onto
from gflow.analysis.key_classes import top_dominance as top_dominance
from gflow.analysis.induction import InductionLabels as InductionLabels
from gflow.analysis.induction import StrategyDistances as StrategyDistances
from gflow.analysis.induction import induction_labels as induction_labels
from gflow.analysis.induction import strategy_distances as strategy_distances
from gflow.analysis.induction import strategy_kl as strategy_kl

# Stages
from gflow.analysis.stage import MOVE_NAMES as MOVE_NAMES
from gflow.analysis.stage import STAGE_NAMES as STAGE_NAMES
from gflow.analysis.stage import Stage as Stage
from gflow.analysis.stages import StageDetector as StageDetector
from gflow.analysis.stages import detect_stages as detect_stages
from gflow.analysis.stages import turning_points as turning_points
from gflow.analysis.head_stages import HeadStage as HeadStage
from gflow.analysis.head_stages import detect_head_stages as detect_head_stages
from gflow.analysis.online_stages import ONLINE_SIGNALS as ONLINE_SIGNALS
from gflow.analysis.online_stages import OnlineStageDetector as OnlineStageDetector

# Hessians, critical points and the saddle
from gflow.analysis.hessian import dense_hessian as dense_hessian
from gflow.analysis.hessian import extreme_eigenpairs as extreme_eigenpairs
from gflow.analysis.hessian import flatten as flatten
from gflow.analysis.hessian import hvp as hvp
from gflow.analysis.hessian import lanczos as lanczos
from gflow.analysis.hessian import max_eigenvalue as max_eigenvalue
from gflow.analysis.critical import block_weights as block_weights
from gflow.analysis.critical import hessian_spectrum as hessian_spectrum
from gflow.analysis.critical import linearised_flow as linearised_flow
from gflow.analysis.critical import newton_critical_point as newton_critical_point
from gflow.analysis.saddle import block_spectra as block_spectra
from gflow.analysis.saddle import condensation_rate as condensation_rate
from gflow.analysis.saddle import restricted_newton as restricted_newton
from gflow.analysis.saddle import saddle_rate as saddle_rate
from gflow.analysis.saddle import structure as structure
from gflow.analysis.saddle import unigram_saddle as unigram_saddle
from gflow.analysis.asymmetry import block_singular_values as block_singular_values
from gflow.analysis.asymmetry import embed_rank_one as embed_rank_one
from gflow.analysis.asymmetry import rank_one_critical_point as rank_one_critical_point
from gflow.analysis.asymmetry import rank_one_part as rank_one_part
from gflow.analysis.asymmetry import split_hessian as split_hessian
from gflow.analysis.asymmetry import symmetric_chain as symmetric_chain
from gflow.analysis.asymmetry import tangent_basis as tangent_basis

# Scale invariance past LayerNorm
from gflow.analysis.scale_invariance import layernorm_eps_zero as layernorm_eps_zero
from gflow.analysis.scale_invariance import layernorm_sigmas as layernorm_sigmas
from gflow.analysis.scale_invariance import (
    smallest_layernorm_sigma as smallest_layernorm_sigma,
)
from gflow.analysis.scale_invariance import (
    scale_invariant_mask as scale_invariant_mask,
)
from gflow.analysis.scale_invariance import (
    scale_invariant_norm as scale_invariant_norm,
)

# Sharpness and comparisons
from gflow.analysis.sharpness import adam_scale as adam_scale
from gflow.analysis.sharpness import predicted_departure as predicted_departure
from gflow.analysis.sharpness import (
    preconditioned_sharpness as preconditioned_sharpness,
)
from gflow.analysis.sharpness import sharpness_along as sharpness_along
from gflow.analysis.edge import AdamEdge as AdamEdge
from gflow.analysis.edge import EdgeReading as EdgeReading
from gflow.analysis.edge import GDEdge as GDEdge
from gflow.analysis.edge import MomentumEdge as MomentumEdge
from gflow.analysis.edge import edge_losses as edge_losses
from gflow.analysis.edge import edge_reading as edge_reading
from gflow.analysis.compare import Comparison as Comparison
from gflow.analysis.compare import compare as compare
from gflow.analysis.compare import departure_time as departure_time
from gflow.analysis.compare import fit_order as fit_order
from gflow.analysis.compare import richardson as richardson
from gflow.analysis.compare import stage_shifts as stage_shifts
from gflow.analysis.compare import stage_times as stage_times
from gflow.analysis.sweep_compare import SweepComparison as SweepComparison
from gflow.analysis.sweep_compare import compare_sweep as compare_sweep

__all__ = [
    "DIFFUSE",
    "KEY_CLASSES",
    "MOVE_NAMES",
    "ONLINE_SIGNALS",
    "STAGE_NAMES",
    "attention_rows",
    "class_masks",
    "key_excess",
    "moved_onto",
    "top_dominance",
    "layernorm_eps_zero",
    "layernorm_sigmas",
    "scale_invariant_mask",
    "scale_invariant_norm",
    "smallest_layernorm_sigma",
    "AdamEdge",
    "EdgeReading",
    "GDEdge",
    "MomentumEdge",
    "edge_losses",
    "edge_reading",
    "Comparison",
    "Attending",
    "HeadObservables",
    "HeadStage",
    "InductionLabels",
    "MarkovObservables",
    "OnlineStageDetector",
    "Stage",
    "StageDetector",
    "StageObservables",
    "StrategyDistances",
    "align_signs",
    "attention_entropy",
    "block_singular_values",
    "block_spectra",
    "block_weights",
    "compare",
    "SweepComparison",
    "compare_sweep",
    "condensation_rate",
    "cosine",
    "dense_hessian",
    "departure_time",
    "detect_head_stages",
    "detect_stages",
    "effective_rank",
    "embed_rank_one",
    "entropy",
    "extreme_eigenpairs",
    "fit_order",
    "flatten",
    "head_attention_entropy",
    "hessian_spectrum",
    "hvp",
    "induction_labels",
    "lanczos",
    "linearised_flow",
    "max_eigenvalue",
    "newton_critical_point",
    "predicted_departure",
    "preconditioned_sharpness",
    "adam_scale",
    "rank_one_critical_point",
    "rank_one_part",
    "restricted_newton",
    "richardson",
    "saddle_rate",
    "sequence_attention",
    "sharpness_along",
    "singular_values",
    "split_hessian",
    "stage_shifts",
    "stage_times",
    "strategy_distances",
    "strategy_kl",
    "structure",
    "symmetric_chain",
    "tangent_basis",
    "token_coordinates",
    "turning_points",
    "unigram_saddle",
]
