"""A seeded random sample of the mutants of some files, for a sampled score.

A full ``mutmut run`` over every file of ``[tool.mutmut]`` takes hours on two cores
(a surviving mutant recompiles the programs its tests use). The score of a file can
instead be estimated from a uniform random sample of its mutants. Generate them
first with a run that selects none (``mutmut run "nothing*"`` writes the mutants and
their .meta files, then ends in mutmut's "nothing matches" assertion), then::

    mutmut run $(python tests/mutation/sample.py --per-file 20 --seed 0 \\
        gflow/dynamics/solvers/auto.py gflow/problems/transformer.py ...)
    python tests/mutation/score.py

Keep ``[tool.mutmut]`` unchanged between passes: mutmut resets every recorded
result when its configuration changes.

``score.py`` then gives each file's score over the mutants checked, with a 95%
Wilson interval where only a sample was checked.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path


def mutant_names(source: str, root: Path = Path("mutants")) -> list[str]:
    """Every mutant of one source file (``gflow/...py``), sorted, from its .meta."""
    meta = root / (source + ".meta")
    if not meta.exists():
        raise SystemExit(f"{meta} does not exist: generate the mutants first")
    return sorted(json.loads(meta.read_text())["exit_code_by_key"])


def sample(names: list[str], per_file: int, seed: int | str) -> list[str]:
    """``per_file`` of ``names`` drawn without replacement (all if fewer), sorted;
    the same seed and names give the same sample."""
    if per_file >= len(names):
        return sorted(names)
    return sorted(random.Random(seed).sample(sorted(names), per_file))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sources", nargs="+", help="source files, as in only_mutate")
    ap.add_argument("--per-file", type=int, default=25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--root", type=Path, default=Path("mutants"))
    args = ap.parse_args(argv)
    for source in args.sources:
        # one stream per file, seeded by its name: the files named beside it do
        # not change its sample
        names = mutant_names(source, args.root)
        for name in sample(names, args.per_file, f"{args.seed}:{source}"):
            print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
