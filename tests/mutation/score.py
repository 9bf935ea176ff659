"""The mutation score of gflow's numerical core, from a finished ``mutmut run``.

Run from the project root after ``mutmut run``::

    python tests/mutation/score.py [--survivors]

It reads mutmut's per-file results (``mutants/**/*.meta``) and the triaged
survivors (``tests/mutation/equivalent.txt``: one mutant name per line, under
section lines ``## equivalent: why`` or ``## boundary: why``), and prints per file
and in total: killed, survived, not covered by any selected test, equivalent,
boundary-only, timed out, not checked, and

    score  = killed / (killed + survived + not covered)   (triaged ones left out)
    strict = the same with the boundary-only mutants counted as survivors

and, for a file of which only a sample was checked (``sample.py``), the 95% Wilson
interval of its score.

Equivalent mutants compute the same results (a float cast of float arrays, a sign
variable's magnitude). Boundary-only mutants differ only when a float lands exactly
on a threshold (``<`` for ``<=``) of a continuous signal. Timeouts are left out of
the score both ways (a loaded machine can time out a healthy test), and so are
mutants not checked yet; both are printed.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).parent
KILLED, SURVIVED, NO_TESTS = {1, 3}, {0}, {5, 33}
TIMEOUT = {24, -24, 36, 152, 255}


def equivalents(path: Path = HERE / "equivalent.txt") -> dict[str, str]:
    """Mutant name -> its kind, ``equivalent`` or ``boundary``, from the sections."""
    out, kind = {}, None
    for line in path.read_text().splitlines() if path.exists() else []:
        if line.startswith("## "):
            kind = line[3:].split(":")[0].strip()
            if kind not in ("equivalent", "boundary"):
                raise ValueError(f"{path}: unknown section {line!r}")
        elif line.split("#")[0].strip():
            if kind is None:
                raise ValueError(f"{path}: {line!r} comes before any section")
            out[line.split("#")[0].strip()] = kind
    return out


def results(root: Path = Path("mutants")) -> dict[str, dict[str, int | None]]:
    """source file -> {mutant name: exit code (None: not checked)}."""
    out = {}
    for meta in sorted(root.glob("gflow/**/*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        out[str(meta.relative_to(root))[: -len(".meta")]] = codes
    return out


def tally(codes: dict[str, int | None], equivalent: dict[str, str]) -> Counter:
    c = Counter()
    for name, code in codes.items():
        if code is None:
            c["unchecked"] += 1
        elif code in KILLED:
            c["killed"] += 1
        elif code in TIMEOUT:
            c["timeout"] += 1
        elif name in equivalent:
            c[equivalent[name]] += 1
        elif code in SURVIVED:
            c["survived"] += 1
        elif code in NO_TESTS:
            c["no_tests"] += 1
        else:
            c["other"] += 1
    return c


def score(c: Counter, strict: bool = False) -> float:
    live = c["killed"] + c["survived"] + c["no_tests"]
    live += c["boundary"] if strict else 0
    return 100.0 * c["killed"] / live if live else float("nan")


def wilson(killed: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson interval of a killed fraction, in percent, from ``n`` checked
    live mutants (a sampled score's uncertainty)."""
    if n == 0:
        return float("nan"), float("nan")
    p = killed / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5 / (1 + z * z / n)
    return 100.0 * (mid - half), 100.0 * (mid + half)


def interval(c: Counter) -> str:
    """'lo-hi%' where only a sample of the file's mutants was checked, else ''."""
    if not c["unchecked"]:
        return ""
    lo, hi = wilson(c["killed"], c["killed"] + c["survived"] + c["no_tests"])
    return f"  [{lo:.0f}-{hi:.0f}%]"


def main(argv: list[str]) -> int:
    equivalent = equivalents()
    by_file = results()
    if not by_file:
        print("no mutmut results: run `mutmut run` first", file=sys.stderr)
        return 2
    cols = (
        "killed",
        "survived",
        "no_tests",
        "equivalent",
        "boundary",
        "timeout",
        "unchecked",
    )
    head = "".join(f"{c:>11s}" for c in cols)
    w = max([24] + [len(p) + 2 for p in by_file])
    print(f"{'file':{w}s}{head}{'score':>8s}{'strict':>8s}")
    total = Counter()
    for path, codes in by_file.items():
        c = tally(codes, equivalent)
        if c["unchecked"] == sum(c.values()):
            continue  # nothing of this file checked (a run of other files' mutants)
        total += c
        row = "".join(f"{c[k]:11d}" for k in cols)
        print(f"{path:{w}s}{row}{score(c):7.1f}%{score(c, True):7.1f}%{interval(c)}")
    row = "".join(f"{total[k]:11d}" for k in cols)
    print(
        f"{'total':{w}s}{row}{score(total):7.1f}%{score(total, True):7.1f}%"
        f"{interval(total)}"
    )
    if "--survivors" in argv:
        for codes in by_file.values():
            for name, code in codes.items():
                if code in SURVIVED | NO_TESTS and name not in equivalent:
                    print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
