"""Subword tokenisers trained offline on the corpus (issue 16): BPE and unigram.

``SubwordTokenizer.train(text, kind="bpe", vocab_size=2000)`` trains a Hugging Face
``tokenizers`` model on the text itself (nothing is downloaded) with
sentencepiece-style whitespace marking: every space becomes the piece ``▁``
(``WHITESPACE``). With ``whitespace="isolated"`` (the default) each ``▁`` is a
token of its own, so the whitespace piece is the corpus' most frequent token and
can be tracked like any word (the paper's "focus on whitespace"); with
``"prefix"`` it is glued to the word that follows, as SentencePiece does (``▁the``).
Newlines count as spaces. Decoding maps ``▁`` back to spaces, so a text whose
characters all occurred in training round-trips up to its newlines.

The trained tokeniser is one JSON document (``to_json`` / ``from_json``): a run
directory keeps it as ``tokenizer.json`` and ``--resume`` reuses it
instead of training again. Training is deterministic: the same text and settings
give the same JSON.

Needs the ``tokenizers`` package (the ``text`` extra: ``pip install 'gflow[text]'``).
"""

from __future__ import annotations

from typing import Any

#: The whitespace piece (U+2581, as SentencePiece writes it).
WHITESPACE = "\u2581"
#: Subword kinds and the whitespace modes.
KINDS = ("bpe", "unigram")
WHITESPACE_MODES = ("isolated", "prefix")
_UNK = "<unk>"


def _tokenizers():
    try:
        import tokenizers
    except ImportError as e:
        raise ImportError(
            "subword tokenisers need the tokenizers package: pip install 'gflow[text]'"
        ) from e
    return tokenizers


class SubwordTokenizer:
    """A trained subword tokeniser: ``tok(text)`` gives the list of piece strings.

    Build one with ``train`` or ``from_json``/``load``; ``kind``, ``vocab_size`` and
    ``whitespace`` describe it.
    """

    def __init__(self, tokenizer: Any, *, kind: str, whitespace: str):
        self._tok = tokenizer
        self.kind = kind
        self.whitespace = whitespace

    @classmethod
    def train(
        cls,
        text: str,
        *,
        kind: str = "bpe",
        vocab_size: int = 2000,
        whitespace: str = "isolated",
    ) -> SubwordTokenizer:
        """Train on ``text`` (module docstring).

        Args:
            text: the training corpus.
            kind: ``"bpe"`` or ``"unigram"``.
            vocab_size: the number of pieces (with ``<unk>`` and the characters), at
                least 32; a small corpus may yield fewer.
            whitespace: ``"isolated"`` or ``"prefix"``.
        """
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if whitespace not in WHITESPACE_MODES:
            raise ValueError(
                f"whitespace must be one of {WHITESPACE_MODES}, got {whitespace!r}"
            )
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
            raise TypeError(f"vocab_size must be an integer, got {vocab_size!r}")
        if vocab_size < 32:
            raise ValueError(f"vocab_size must be >= 32, got {vocab_size}")
        if not text.strip():
            raise ValueError("cannot train a tokeniser on an empty text")
        tk = _tokenizers()
        if kind == "bpe":
            model = tk.models.BPE(unk_token=_UNK)
            trainer = tk.trainers.BpeTrainer(
                vocab_size=vocab_size,
                special_tokens=[_UNK],
                initial_alphabet=[WHITESPACE],
                show_progress=False,
            )
        else:
            model = tk.models.Unigram()
            trainer = tk.trainers.UnigramTrainer(
                vocab_size=vocab_size,
                special_tokens=[_UNK],
                unk_token=_UNK,
                initial_alphabet=[WHITESPACE],
                show_progress=False,
            )
        tok = tk.Tokenizer(model)
        tok.normalizer = tk.normalizers.Sequence(
            [tk.normalizers.NFKC(), tk.normalizers.Replace("\n", " ")]
        )
        split = [
            tk.pre_tokenizers.Metaspace(replacement=WHITESPACE, prepend_scheme="never")
        ]
        if whitespace == "isolated":
            split.append(tk.pre_tokenizers.Split(WHITESPACE, behavior="isolated"))
        tok.pre_tokenizer = tk.pre_tokenizers.Sequence(split)
        tok.decoder = tk.decoders.Metaspace(
            replacement=WHITESPACE, prepend_scheme="never"
        )
        tok.train_from_iterator(_chunks(text), trainer=trainer)
        return cls(tok, kind=kind, whitespace=whitespace)

    def __call__(self, text: str) -> list[str]:
        """The pieces of ``text``, in order."""
        out: list[str] = []
        for enc in self._tok.encode_batch(list(_chunks(text))):
            out += enc.tokens
        return out

    def decode(self, pieces: list[str]) -> str:
        """The text of a list of pieces (``▁`` back to spaces)."""
        ids = [self._tok.token_to_id(p) for p in pieces]
        unk = self._tok.token_to_id(_UNK)
        return self._tok.decode([unk if i is None else i for i in ids])

    @property
    def vocab_size(self) -> int:
        """The number of pieces the model holds."""
        return self._tok.get_vocab_size()

    def to_json(self) -> str:
        """The whole tokeniser as one JSON document (with ``kind`` and
        ``whitespace`` in its ``gflow`` entry)."""
        import json

        doc = json.loads(self._tok.to_str())
        doc["gflow"] = {"kind": self.kind, "whitespace": self.whitespace}
        return json.dumps(doc, ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SubwordTokenizer:
        import json

        doc = json.loads(text)
        meta = doc.pop("gflow", None)
        if not isinstance(meta, dict) or meta.get("kind") not in KINDS:
            raise ValueError("not a gflow subword tokeniser (no 'gflow' entry)")
        tok = _tokenizers().Tokenizer.from_str(json.dumps(doc))
        return cls(
            tok, kind=meta["kind"], whitespace=meta.get("whitespace", "isolated")
        )


def _chunks(text: str, size: int = 1 << 16):
    """The text in pieces of about ``size`` characters, cut before a space or a
    newline (the tokeniser's input batches: no word is cut, and a ``▁`` prefix stays
    with its word)."""
    start = 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):
            cut = max(text.rfind(" ", start, end), text.rfind("\n", start, end))
            end = cut if cut > start else end  # the space opens the next chunk
        yield text[start:end]
        start = end
