"""Tokenisers (word-level, byte-level) and a frequency-ordered vocabulary.

Everything is deterministic: the vocabulary orders token types by decreasing count,
ties broken by the token string.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Any

import numpy as np
from jaxtyping import Float, Int

#: The unknown token. WikiText's own ``<unk>`` maps to it too.
UNK = "<unk>"

# <unk> kept whole; words are runs of letters/digits/underscore; every other
# non-space character (punctuation) is a token of its own.
_WORD_RE = re.compile(r"<unk>|\w+|[^\w\s]")


@dataclasses.dataclass(frozen=True)
class WordTokenizer:
    """Word-level tokens: words, and punctuation split off as single characters.

    Attributes:
        lowercase: lower-case the text first (``<unk>`` stays the unknown token).
    """

    lowercase: bool = False

    def __call__(self, text: str) -> list[str]:
        if self.lowercase:
            text = text.lower()
        return _WORD_RE.findall(text)


def _byte_name(b: int) -> str:
    c = chr(b)
    return c if 33 <= b < 127 else f"<0x{b:02x}>"


@dataclasses.dataclass(frozen=True)
class ByteTokenizer:
    """Byte-level tokens: the UTF-8 bytes of the text, printable ASCII as itself and
    every other byte as ``<0xNN>`` (space is ``<0x20>``)."""

    def __call__(self, text: str) -> list[str]:
        names = [_byte_name(b) for b in range(256)]
        return [names[b] for b in text.encode("utf-8")]


#: CLI names of the tokenisers.
TOKENIZERS = {
    "word": WordTokenizer(),
    "word-lower": WordTokenizer(lowercase=True),
    "byte": ByteTokenizer(),
}


@dataclasses.dataclass(frozen=True, eq=False)
class Vocabulary:
    """Token types in decreasing order of count (ties by string), with their counts.

    Attributes:
        tokens: the token strings; id i is ``tokens[i]``. Holds ``UNK``.
        counts: int [d], how often each type occurs in the corpus it was built from
            (the unknown token's count is every token outside the vocabulary plus the
            corpus' own ``<unk>``).
    """

    tokens: tuple[str, ...]
    counts: Int[np.ndarray, " d"]

    def __post_init__(self):
        if len(self.tokens) != len(self.counts):
            raise ValueError("tokens and counts must have the same length")
        if UNK not in self.tokens:
            raise ValueError(f"a vocabulary must hold the unknown token {UNK!r}")

    @classmethod
    def build(cls, tokens: list[str], size: int) -> Vocabulary:
        """The ``size`` most frequent token types plus ``UNK`` (d = size + 1 types).

        Args:
            tokens: the tokenised corpus.
            size: V, the number of kept types besides the unknown token (>= 1).
        """
        if not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"vocab size must be a positive integer, got {size!r}")
        counter = collections.Counter(tokens)
        unk = counter.pop(UNK, 0)
        ranked = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
        kept, dropped = ranked[:size], ranked[size:]
        unk += sum(c for _, c in dropped)
        items = sorted([*kept, (UNK, unk)], key=lambda kv: (-kv[1], kv[0]))
        return cls(
            tokens=tuple(t for t, _ in items),
            counts=np.array([c for _, c in items], dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def unk_id(self) -> int:
        return self.tokens.index(UNK)

    @property
    def frequencies(self) -> Float[np.ndarray, " d"]:
        """float [d]: counts / total."""
        return self.counts / self.counts.sum()

    def id(self, token: str) -> int:
        """The id of ``token``; ValueError naming the token when it is not kept."""
        try:
            return self.tokens.index(token)
        except ValueError:
            raise ValueError(
                f"token {token!r} is not in the {len(self)}-type vocabulary: "
                "raise the vocab size or pick another token"
            ) from None

    def encode(self, tokens: list[str]) -> Int[np.ndarray, " n"]:
        """int32 ids; types outside the vocabulary (and ``<unk>``) become ``unk_id``."""
        index = {t: i for i, t in enumerate(self.tokens)}
        unk = self.unk_id
        return np.fromiter((index.get(t, unk) for t in tokens), np.int32, len(tokens))

    def frequency_table(self) -> list[dict[str, Any]]:
        """One row per type: rank (= id), token, count, frequency."""
        freq = self.frequencies
        return [
            {"id": i, "token": t, "count": int(c), "frequency": float(f)}
            for i, (t, c, f) in enumerate(zip(self.tokens, self.counts, freq))
        ]
