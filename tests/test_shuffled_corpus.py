"""The fair text test's control corpus: the same words, another order, seeded."""

from experiments.shuffled_corpus import shuffled_words


def test_the_shuffle_keeps_every_word_and_is_seeded():
    text = "one two  three\nfour five six seven eight nine ten"
    out = shuffled_words(text, seed=0)
    assert sorted(out.split()) == sorted(text.split())
    assert out.split() != text.split()
    assert out == shuffled_words(text, seed=0) != shuffled_words(text, seed=1)
