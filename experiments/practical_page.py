"""docs/practical_models.md by one command (issue 30 point 5).

The page has four generated blocks, each from one resumable experiment: the
ladder read with the stage rules against its i.i.d. control
(``experiments/stage_controls.py --ladder``, about 50 min from empty caches), BPE
text against its shuffled control with the same rules
(``experiments/stage_controls.py --text``), GD against the flow on
every rung
(``experiments/ladder_flow.py``) and the fair text test
(``experiments/fair_text_test.py``). This command runs them in that order, each in
its own process (each sets its own precision), skipping every run already cached,
and rewrites each block.

The fair text test's flows cost 17-30 min a seed (10⁴ windows to t = 1800), hours
for its 8 cells, so by default its block is only rewritten from the runs it finds;
``--with-fair-text`` runs its missing cells too.

Command:
    PYTHONPATH=$PWD python experiments/practical_page.py              # the page
    PYTHONPATH=$PWD python experiments/practical_page.py --doc-only   # from caches
    PYTHONPATH=$PWD python experiments/practical_page.py --quick      # smoke run
Runtime: about 70 min of computing on the 2 cores from empty caches without the
fair text test (946 s, 8 min, 3 min, 18 min and 25 min for the five ladder parts,
as their blocks record); seconds when everything is cached.
Writes: experiments/results/practical_page/summary.json (each part's exit status
and wall time, appended per invocation).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "results" / "practical_page"


@dataclasses.dataclass(frozen=True)
class Part:
    """One generated block: the script and the flags that make it."""

    name: str
    script: str
    flags: tuple[str, ...] = ()
    expensive: bool = False  # hours: only its block, unless asked for

    def argv(self, *, quick: bool, doc_only: bool) -> list[str]:
        extra = ["--quick"] if quick else []
        if doc_only or (self.expensive and not quick):
            extra.append("--doc-only")
        return [
            sys.executable,
            str(ROOT / "experiments" / self.script),
            *self.flags,
        ] + (extra)


PARTS = (
    Part("ladder read with the stage rules", "stage_controls.py", ("--ladder",)),
    Part("BPE text read with the stage rules", "stage_controls.py", ("--text",)),
    Part("GD against the flow per rung", "ladder_flow.py"),
    Part("fair text test", "fair_text_test.py", expensive=True),
)


def _run(argv: Sequence[str]) -> int:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p
    )
    return subprocess.run(list(argv), cwd=ROOT, env=env).returncode


def build(
    *,
    quick: bool = False,
    doc_only: bool = False,
    with_fair_text: bool = False,
    parts: Sequence[Part] = PARTS,
    runner: Callable[[Sequence[str]], int] = _run,
    out: Path = OUT,
) -> list[dict]:
    """Every part in order; stops at the first that fails (its exit status is in
    the record), so a later part never writes a block over a broken run."""
    records = []
    for i, part in enumerate(parts, 1):
        if with_fair_text and part.expensive:
            part = dataclasses.replace(part, expensive=False)
        argv = part.argv(quick=quick, doc_only=doc_only)
        print(f"[{i}/{len(parts)}] {part.name}: {' '.join(argv[1:])}", flush=True)
        start = time.perf_counter()
        code = runner(argv)
        wall = time.perf_counter() - start
        records.append(
            {"part": part.name, "argv": argv[1:], "rc": code, "wall_s": wall}
        )
        print(f"[{i}/{len(parts)}] {part.name}: exit {code}, {wall:.0f} s", flush=True)
        if code:
            break
    if not quick:
        out.mkdir(parents=True, exist_ok=True)
        entry = {
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "parts": records,
        }
        with open(out / "summary.json", "a") as f:
            f.write(json.dumps(entry) + "\n")
    return records


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="every part's smoke run")
    p.add_argument("--doc-only", action="store_true", help="every block from caches")
    p.add_argument(
        "--with-fair-text",
        action="store_true",
        help="run the fair text test's missing cells too (hours)",
    )
    a = p.parse_args(argv)
    records = build(quick=a.quick, doc_only=a.doc_only, with_fair_text=a.with_fair_text)
    failed = [r for r in records if r["rc"]]
    if failed:
        print(f"stopped: {failed[0]['part']} exited {failed[0]['rc']}", file=sys.stderr)
        return 1
    total = sum(r["wall_s"] for r in records)
    print(f"the page's {len(records)} blocks: {total / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
