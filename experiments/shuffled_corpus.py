"""A corpus with its words in a random order: the control of the fair text test.

Question: does ``gflow text``'s row detector report focus or dilution on text whose
order says nothing? Shuffling whole words (split on whitespace) keeps every word,
hence every BPE piece of the prefix mode (where ▁ is glued to the word), and their
frequencies, while the context no longer predicts the next piece.

Command:  python experiments/shuffled_corpus.py ../shared/data/tinystories/sample.txt \
            OUT.txt [--seed 0]
          then the fair test's ``gflow text`` command with ``--corpus OUT.txt``.
Writes:   OUT.txt (never commit a corpus; write it outside the repository).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def shuffled_words(text: str, seed: int = 0) -> str:
    """``text``'s words (whitespace-separated) in a random order of ``seed``, one
    space between them."""
    words = text.split()
    order = np.random.default_rng(seed).permutation(len(words))
    return " ".join(words[i] for i in order)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("corpus", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if not a.corpus.exists():
        raise SystemExit(f"no corpus at {a.corpus}")
    a.out.write_text(shuffled_words(a.corpus.read_text(), a.seed) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
