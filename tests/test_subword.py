"""Subword tokenisers (issue 16): trained offline, deterministic, round trip, the
whitespace piece, and a vocabulary built from their pieces."""

import collections
import json

import pytest

pytest.importorskip("tokenizers")

from gflow.text import WHITESPACE, SubwordTokenizer, Vocabulary  # noqa: E402

TEXT = (
    "Once upon a time, there was a little girl named Lily. She liked to play "
    "outside.\nOne day, Lily saw a big red ball in the park. She wanted the ball, "
    "so she ran to it. The ball was fun!\n"
) * 20


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def kind(request):
    return request.param


def test_round_trip_and_whitespace_piece(kind):
    tok = SubwordTokenizer.train(TEXT, kind=kind, vocab_size=120)
    pieces = tok(TEXT)
    assert tok.decode(pieces) == TEXT.replace("\n", " ")
    counts = collections.Counter(pieces)
    spaces = TEXT.count(" ") + TEXT.count("\n")
    assert counts[WHITESPACE] == spaces  # isolated: one ▁ per space, nothing else
    assert counts.most_common(1)[0][0] == WHITESPACE
    assert all(p == WHITESPACE or WHITESPACE not in p for p in counts)
    assert 32 <= tok.vocab_size <= 120
    # the size asked for bounds the size trained (BPE reaches it exactly here)
    size = SubwordTokenizer.train(TEXT, kind=kind, vocab_size=40).vocab_size
    assert size <= 40 and (kind != "bpe" or size == 40)


def test_prefix_mode_glues_the_whitespace_to_the_next_word(kind):
    tok = SubwordTokenizer.train(TEXT, kind=kind, vocab_size=120, whitespace="prefix")
    pieces = tok(TEXT)
    assert tok.decode(pieces) == TEXT.replace("\n", " ")
    assert any(p.startswith(WHITESPACE) and len(p) > 1 for p in pieces)


def test_json_round_trip_and_determinism(kind):
    a = SubwordTokenizer.train(TEXT, kind=kind, vocab_size=100)
    b = SubwordTokenizer.from_json(a.to_json())
    assert (b.kind, b.whitespace) == (kind, "isolated")
    assert b(TEXT) == a(TEXT)
    again = SubwordTokenizer.train(TEXT, kind=kind, vocab_size=100)
    if kind == "bpe":
        assert again.to_json() == a.to_json()  # bit for bit
    else:  # unigram: the same pieces; its EM scores agree to ~1e-3, not bit for bit
        pieces = lambda t: {p for p, _ in json.loads(t.to_json())["model"]["vocab"]}  # noqa: E731
        assert pieces(again) == pieces(a)


def test_chunked_encoding_equals_one_piece_encoding(kind):
    """Long texts are encoded in chunks cut before a space: the pieces must be
    those of the whole text at once."""
    from gflow.text.subword import _chunks

    tok = SubwordTokenizer.train(TEXT, kind=kind, vocab_size=100, whitespace="prefix")
    whole = tok._tok.encode(TEXT).tokens
    chunks = list(_chunks(TEXT, size=97))
    assert len(chunks) > 10 and "".join(chunks) == TEXT
    # a stretch without a space is cut at the size, not before a space
    assert list(_chunks("abcdefgh ij", size=4)) == ["abcd", "efgh", " ij"]
    assert [p for c in chunks for p in tok._tok.encode(c).tokens] == whole


def test_vocabulary_from_pieces_keeps_every_piece():
    tok = SubwordTokenizer.train(TEXT, vocab_size=100)
    pieces = tok(TEXT)
    vocab = Vocabulary.build(pieces, tok.vocab_size)
    assert vocab.tokens[0] == WHITESPACE
    assert vocab.counts[vocab.unk_id] == 0  # every piece is kept: no <unk>
    assert vocab.id(WHITESPACE) == 0


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="kind"):
        SubwordTokenizer.train(TEXT, kind="wordpiece")
    with pytest.raises(ValueError, match="whitespace"):
        SubwordTokenizer.train(TEXT, whitespace="none")
    with pytest.raises(ValueError, match=">= 32"):
        SubwordTokenizer.train(TEXT, vocab_size=8)
    with pytest.raises(ValueError, match="empty"):
        SubwordTokenizer.train("  \n ")
    with pytest.raises(ValueError, match="gflow"):
        SubwordTokenizer.from_json('{"model": {}}')
