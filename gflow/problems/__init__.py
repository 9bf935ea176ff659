"""What is learned: the attention models, Markov chains and their losses.

Public names, by concept: the one-layer ``AttentionModel`` and the deep
``Transformer``; Markov chains and streams of their sequences; the population and
sequence losses (and the blocked cross-entropy of an output layer that they use
at text vocabularies).
"""

# Models
from gflow.problems.model import AttentionModel as AttentionModel
from gflow.problems.transformer import LayerNorm as LayerNorm
from gflow.problems.transformer import Transformer as Transformer
from gflow.problems.transformer import (
    product_singular_values as product_singular_values,
)

# Markov data
from gflow.problems.markov import MarkovChain as MarkovChain
from gflow.problems.markov import MarkovStream as MarkovStream
from gflow.problems.markov import stationary_distribution as stationary_distribution

# In-context Markov chains (ICL-MC)
from gflow.problems.icl_markov import STRATEGIES as STRATEGIES
from gflow.problems.icl_markov import InContextMarkov as InContextMarkov
from gflow.problems.icl_markov import StrategyLosses as StrategyLosses

# Losses
from gflow.problems.losses import PopulationLoss as PopulationLoss
from gflow.problems.losses import SequenceLoss as SequenceLoss
from gflow.problems.losses import population_attention as population_attention
from gflow.problems.losses import population_logits as population_logits
from gflow.problems.losses import population_loss as population_loss
from gflow.problems.losses import sequence_loss as sequence_loss
from gflow.problems.cross_entropy import head_cross_entropy as head_cross_entropy

__all__ = [
    "AttentionModel",
    "InContextMarkov",
    "LayerNorm",
    "MarkovChain",
    "MarkovStream",
    "PopulationLoss",
    "STRATEGIES",
    "SequenceLoss",
    "StrategyLosses",
    "Transformer",
    "head_cross_entropy",
    "population_attention",
    "population_logits",
    "population_loss",
    "product_singular_values",
    "sequence_loss",
    "stationary_distribution",
]
