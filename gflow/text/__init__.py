"""Natural text (issue 6): corpora, tokenisers, windows, a positional option and the
attention-row observables of query tokens."""

from gflow.text.corpus import HUB_CORPORA, load_corpus
from gflow.text.fullbatch import run_full_batch
from gflow.text.observables import (
    TextObservables,
    default_queries,
    observe_snapshots,
    query_rows,
    type_attention,
    window_attention,
)
from gflow.text.positional import PositionalAttentionModel, TextLoss, text_loss
from gflow.text.tokenize import (
    TOKENIZERS,
    UNK,
    ByteTokenizer,
    Vocabulary,
    WordTokenizer,
)
from gflow.text.windows import WindowStream, fixed_sample

__all__ = [
    "HUB_CORPORA",
    "TOKENIZERS",
    "UNK",
    "ByteTokenizer",
    "PositionalAttentionModel",
    "TextLoss",
    "TextObservables",
    "Vocabulary",
    "WindowStream",
    "WordTokenizer",
    "default_queries",
    "fixed_sample",
    "load_corpus",
    "observe_snapshots",
    "query_rows",
    "run_full_batch",
    "text_loss",
    "type_attention",
    "window_attention",
]
