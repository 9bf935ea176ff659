"""Natural text (issue 6): corpora, tokenisers, windows, a positional option and the
attention-row observables of query tokens.

Public names, by concept: corpora and tokenisers; windows of tokens; the
positional model and its losses; training loops; the observables of query rows,
their phases and the stability check.
"""

# Corpora and tokenisers
from gflow.text.corpus import HUB_CORPORA as HUB_CORPORA
from gflow.text.corpus import PACKAGED_CORPORA as PACKAGED_CORPORA
from gflow.text.corpus import corpus_path as corpus_path
from gflow.text.corpus import load_corpus as load_corpus
from gflow.text.tokenize import TOKENIZERS as TOKENIZERS
from gflow.text.tokenize import UNK as UNK
from gflow.text.tokenize import ByteTokenizer as ByteTokenizer
from gflow.text.tokenize import Vocabulary as Vocabulary
from gflow.text.tokenize import WordTokenizer as WordTokenizer
from gflow.text.subword import WHITESPACE as WHITESPACE
from gflow.text.subword import WHITESPACE_MODES as WHITESPACE_MODES
from gflow.text.subword import SubwordTokenizer as SubwordTokenizer

# Windows
from gflow.text.windows import WindowStream as WindowStream
from gflow.text.windows import fixed_sample as fixed_sample
from gflow.text.windows import query_windows as query_windows

# The model and its losses
from gflow.text.positional import PositionalAttentionModel as PositionalAttentionModel
from gflow.text.positional import TextLoss as TextLoss
from gflow.text.positional import text_loss as text_loss
from gflow.text.counts import counts_loss as counts_loss
from gflow.text.counts import window_log_counts as window_log_counts

# Training
from gflow.text.fullbatch import full_batch_arrays as full_batch_arrays
from gflow.text.fullbatch import run_full_batch as run_full_batch
from gflow.text.fullbatch import warmup_cosine as warmup_cosine
from gflow.text.train import batch_loss as batch_loss
from gflow.text.train import run_minibatch as run_minibatch

# What a text run's names become
from gflow.text.strategies import AbstractFlowMethod as AbstractFlowMethod
from gflow.text.strategies import AbstractTextModel as AbstractTextModel
from gflow.text.strategies import AbstractTokenization as AbstractTokenization
from gflow.text.strategies import DeepText as DeepText
from gflow.text.strategies import FixedTokenization as FixedTokenization
from gflow.text.strategies import FullBatchGD as FullBatchGD
from gflow.text.strategies import FullBatchOptimizer as FullBatchOptimizer
from gflow.text.strategies import IntegratedFlow as IntegratedFlow
from gflow.text.strategies import OneLayerText as OneLayerText
from gflow.text.strategies import SubwordTokenization as SubwordTokenization

# Observables of query rows
from gflow.text.observables import TextObservables as TextObservables
from gflow.text.observables import default_queries as default_queries
from gflow.text.observables import observe_saves as observe_saves
from gflow.text.observables import observe_snapshots as observe_snapshots
from gflow.text.observables import query_rows as query_rows
from gflow.text.observables import type_attention as type_attention
from gflow.text.observables import window_attention as window_attention
from gflow.text.row_phases import describe as describe
from gflow.text.row_phases import row_phases as row_phases
from gflow.text.stability import checked_saves as checked_saves
from gflow.text.stability import stability_check as stability_check
from gflow.text.stability import stability_line as stability_line
from gflow.text.stability import stability_warning as stability_warning

__all__ = [
    "AbstractFlowMethod",
    "AbstractTextModel",
    "AbstractTokenization",
    "DeepText",
    "FixedTokenization",
    "FullBatchGD",
    "FullBatchOptimizer",
    "IntegratedFlow",
    "OneLayerText",
    "SubwordTokenization",
    "ByteTokenizer",
    "HUB_CORPORA",
    "PACKAGED_CORPORA",
    "PositionalAttentionModel",
    "SubwordTokenizer",
    "TOKENIZERS",
    "TextLoss",
    "TextObservables",
    "UNK",
    "Vocabulary",
    "WHITESPACE",
    "WHITESPACE_MODES",
    "WindowStream",
    "WordTokenizer",
    "batch_loss",
    "checked_saves",
    "corpus_path",
    "counts_loss",
    "default_queries",
    "describe",
    "fixed_sample",
    "full_batch_arrays",
    "load_corpus",
    "observe_saves",
    "observe_snapshots",
    "query_rows",
    "query_windows",
    "row_phases",
    "run_full_batch",
    "run_minibatch",
    "stability_check",
    "stability_line",
    "stability_warning",
    "text_loss",
    "type_attention",
    "warmup_cosine",
    "window_attention",
    "window_log_counts",
]
