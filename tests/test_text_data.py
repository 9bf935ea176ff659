"""Corpora, tokenisers, vocabularies and windows (gflow.text)."""

from pathlib import Path

import jax
import numpy as np
import pytest

from gflow.text import (
    PACKAGED_CORPORA,
    UNK,
    ByteTokenizer,
    Vocabulary,
    WindowStream,
    WordTokenizer,
    corpus_path,
    fixed_sample,
    load_corpus,
)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TEXT = "The cat sat. The dog sat, and the cat ran!\nA <unk> ran."


def test_word_tokens_split_punctuation_and_keep_unk():
    toks = WordTokenizer()(TEXT)
    assert toks[:4] == ["The", "cat", "sat", "."]
    assert "," in toks and "!" in toks and UNK in toks
    lower = WordTokenizer(lowercase=True)(TEXT)
    assert lower.count("the") == 3 and UNK in lower


def test_byte_tokens_round_trip():
    text = "ab c\né"
    toks = ByteTokenizer()(text)
    assert len(toks) == len(text.encode("utf-8"))
    assert toks[:3] == ["a", "b", "<0x20>"]


def test_vocabulary_order_ties_and_unknown():
    toks = ["b", "a", "c", "a", "b", "d", UNK, "e"]
    v = Vocabulary.build(toks, size=2)
    # a, b (2 each; tie by string) kept; c, d, e and the corpus' <unk> -> UNK (4).
    assert v.tokens == (UNK, "a", "b")
    assert v.counts.tolist() == [4, 2, 2]
    assert v.counts.sum() == len(toks)
    ids = v.encode(toks)
    assert ids.tolist() == [2, 1, 0, 1, 2, 0, 0, 0]
    assert np.isclose(v.frequencies.sum(), 1.0)
    assert v.frequency_table()[1] == {
        "id": 1,
        "token": "a",
        "count": 2,
        "frequency": 0.25,
    }
    # Deterministic: a shuffled corpus gives the same vocabulary.
    rng = np.random.default_rng(0)
    again = Vocabulary.build([str(t) for t in rng.permutation(toks)], size=2)
    assert again.tokens == v.tokens and np.array_equal(again.counts, v.counts)
    with pytest.raises(ValueError, match="not in the"):
        v.id("zebra")
    with pytest.raises(ValueError, match="vocab size"):
        Vocabulary.build(toks, size=0)


def test_load_corpus_file_folder_and_errors(tmp_path):
    (tmp_path / "b.txt").write_text("second file")
    (tmp_path / "a.txt").write_text("first file")
    assert load_corpus(tmp_path / "a.txt") == "first file"
    assert load_corpus(tmp_path) == "first file\nsecond file"
    assert load_corpus(tmp_path, max_chars=5) == "first"
    with pytest.raises(ValueError, match="neither a file"):
        load_corpus(tmp_path / "missing.txt")
    # A hub name never downloads unless asked, and the error says what to pass.
    with pytest.raises(ValueError, match="local text file"):
        load_corpus("wikitext")


def test_the_shipped_corpus_is_package_data_with_its_licence(tmp_path, monkeypatch):
    """The text the docs' examples and `--corpus tinystories-excerpt` read ships in
    the package (pyproject's package-data; .ci/wheel_check finds it in the wheel),
    under 100 kB, with its CDLA-Sharing-1.0 note beside it."""
    assert set(PACKAGED_CORPORA) == {"tinystories-excerpt"}
    path = corpus_path()
    assert path == corpus_path("tinystories-excerpt") and path.is_file()
    assert 90_000 < path.stat().st_size < 100_000
    assert "CDLA-Sharing-1.0" in (path.parent / "TINYSTORIES_LICENSE.md").read_text()
    text = load_corpus("tinystories-excerpt")
    assert text == path.read_text() and text.startswith("Spot. Spot saw")
    assert text.endswith("treasures she found.\n")  # ends at a story's end
    assert load_corpus("tinystories-excerpt", max_chars=5) == "Spot."
    # from any folder; a local file of that name comes first
    monkeypatch.chdir(tmp_path)
    assert load_corpus("tinystories-excerpt") == text
    (tmp_path / "tinystories-excerpt").write_text("mine")
    assert load_corpus("tinystories-excerpt") == "mine"
    with pytest.raises(ValueError, match="no corpus 'wikitext' ships"):
        corpus_path("wikitext")
    with pytest.raises(ValueError, match="tinystories-excerpt"):
        load_corpus("no-such-corpus")


@pytest.mark.parametrize(
    "data, offset",
    [
        ("naïve text".encode() + b"\xff\xfe more", 11),  # not UTF-8 (after a 2-byte ï)
        (b"plain text\x00 then a NUL", 10),  # UTF-8, but a NUL is not text
        (b"\x89PNG\r\n\x1a\n\x00\x00", 0),
    ],
    ids=["invalid-utf8", "nul", "png"],
)
def test_load_corpus_refuses_binary_files_naming_the_byte(tmp_path, data, offset):
    """A binary corpus used to be read with errors="replace" and trained on."""
    path = tmp_path / "corpus.txt"
    path.write_bytes(data)
    with pytest.raises(ValueError) as e:
        load_corpus(path)
    message = str(e.value)
    assert str(path) in message and f"byte offset {offset}" in message, message
    assert "\n" not in message
    # a folder's files are checked as well, the message naming the file
    (tmp_path / "fine.txt").write_text("fine")
    with pytest.raises(ValueError, match=f"corpus.txt.*byte offset {offset}"):
        load_corpus(tmp_path)


def test_load_corpus_hub_without_package_is_one_line(monkeypatch):
    import builtins

    real = builtins.__import__

    def fake(name, *a, **k):
        if name == "datasets":
            raise ImportError("no datasets")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(ValueError) as e:
        load_corpus("tinystories", download=True)
    assert "\n" not in str(e.value) and "local text file" in str(e.value)


def test_fixed_sample_windows_are_consecutive_and_deterministic():
    ids = np.arange(100, dtype=np.int32)
    w = fixed_sample(ids, length=7, num=10)
    assert w.shape == (10, 8)
    assert np.all(np.diff(w, axis=1) == 1)  # consecutive tokens
    assert w[0, 0] == 0 and w[-1, -1] == 99  # spread over the whole stream
    assert np.array_equal(w, fixed_sample(ids, length=7, num=10))
    with pytest.raises(ValueError, match="distinct"):
        fixed_sample(ids, length=7, num=1000)
    with pytest.raises(ValueError, match="fewer than one window"):
        fixed_sample(ids[:5], length=7, num=1)


def test_window_stream_keyed():
    ids = np.arange(50, dtype=np.int32)
    stream = WindowStream(ids, length=4, batch=16)
    a = stream(jax.random.key(1))
    assert a.shape == (16, 5)
    assert np.all(np.diff(np.asarray(a), axis=1) == 1)
    assert np.array_equal(a, stream(jax.random.key(1)))
    assert not np.array_equal(a, stream(jax.random.key(2)))
    assert int(a.max()) <= 49


@pytest.mark.skipif(not DATA.is_dir(), reason="shared data not present")
def test_shared_corpora_tokenise():
    wiki = load_corpus(DATA / "wikitext2" / "valid.txt")
    toks = WordTokenizer()(wiki)
    v = Vocabulary.build(toks, size=200)
    assert len(v) == 201
    # WikiText's <unk> and every rare word share the unknown token, the top type.
    assert v.tokens[0] == UNK
    assert v.counts[0] > toks.count(UNK)
    stories = load_corpus(DATA / "tinystories" / "sample.txt")
    vs = Vocabulary.build(WordTokenizer()(stories), size=300)
    assert {"the", ".", ","} <= set(vs.tokens[:10])
