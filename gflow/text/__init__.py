"""Natural text (issue 6): corpora, tokenisers, windows, a positional option and the
attention-row observables of query tokens."""

from .corpus import HUB_CORPORA, load_corpus
from .observables import (
    TextObservables,
    default_queries,
    query_rows,
    type_attention,
    window_attention,
)
from .positional import PositionalAttentionModel, TextLoss, text_loss
from .tokenize import TOKENIZERS, UNK, ByteTokenizer, Vocabulary, WordTokenizer
from .windows import WindowStream, fixed_sample

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
    "query_rows",
    "text_loss",
    "type_attention",
    "window_attention",
]
