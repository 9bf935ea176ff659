"""The ```python blocks of README.md and docs/*.md, and how each is run.

Every block is either a complete example, run as printed in a fresh process in an
empty folder outside the checkout (``tests/test_readme.py``; ``.ci/wheel_check``
runs the ones that need no optional framework against the installed wheel), or a
fragment, whose fence says so (```` ```python fragment ````) and which is only
compiled. No example may read a file of the checkout or of ``../shared``: the text
they need ships with gflow (``gflow.load_corpus("tinystories-excerpt")``).

This module imports nothing of gflow, so that ``.ci/wheel_check`` can run it
against an installed wheel:

    python tests/doc_blocks.py [--no-frameworks] [--only ID ...]

runs the blocks (each in its own temporary folder, with the environment's
variables that point into the checkout removed), compiles the fragments and exits
non-zero when one fails.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The fence info strings a Python block may have.
RUN, FRAGMENT = "python", "python fragment"
#: Optional frameworks: a block importing one needs its extra (pytorch,
#: huggingface, flax, text) and is not run against the bare wheel.
FRAMEWORKS = ("torch", "transformers", "flax", "tokenizers")
#: The blocks the default test run executes (6-12 s each on 2 busy cores); every
#: other runnable block is marked slow (README's 32 s, the concepts' flows 46-69 s,
#: the frameworks' loops).
FAST = {
    # the monitor's Markov loop (7-11 s) runs in the slow set: the default run
    # keeps within 3 minutes on 2 cores
    "docs/monitor.md: From NumPy",
}


@dataclasses.dataclass(frozen=True)
class Block:
    path: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    heading: str  # the nearest heading above it
    info: str  # the fence's info string
    code: str

    @property
    def id(self) -> str:
        return f"{self.path}: {self.heading}"

    @property
    def fragment(self) -> bool:
        return self.info == FRAGMENT

    @property
    def frameworks(self) -> list[str]:
        """The optional frameworks the block imports."""
        names = set()
        for node in ast.walk(ast.parse(self.code)):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module.split(".")[0])
        return [f for f in FRAMEWORKS if f in names]


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def python_blocks(text: str, path: str = "") -> list[Block]:
    """Every fenced block whose info string starts with ``python``, with the
    heading above it (fences of other languages are skipped, and a ``#`` line
    inside a fence is not a heading)."""
    out, heading, fence, start, body = [], "", None, 0, []
    for i, line in enumerate(text.splitlines(keepends=True), 1):
        if fence is None:
            if m := re.match(r"^(```+)\s*(.*?)\s*$", line):
                fence, info, start, body = m.group(1), m.group(2), i, []
            elif m := re.match(r"^#+ (.*?)\s*$", line):
                heading = m.group(1)
        elif line.rstrip() == fence:
            if info.split(" ")[0] in ("python", "py", "python3"):
                out.append(Block(path, start, heading, info, "".join(body)))
            fence = None
        else:
            body.append(line)
    return out


def all_blocks(root: Path = ROOT) -> list[Block]:
    return [
        b
        for f in doc_files(root)
        for b in python_blocks(f.read_text(), f.relative_to(root).as_posix())
    ]


def clean_env(root: Path = ROOT) -> dict[str, str]:
    """os.environ without the variables that point into the checkout or at
    ../shared (PYTHONPATH, TINYSTORIES, ...), except PATH and VIRTUAL_ENV, which
    name the interpreter (CI's virtual environment lies in the checkout)."""
    inside = (str(root), str(root.parent / "shared"))
    return {
        k: v
        for k, v in os.environ.items()
        if k in ("PATH", "VIRTUAL_ENV") or not any(p in v for p in inside)
    }


def run_block(block: Block, folder: Path, timeout: float = 900):
    """Run a block as printed, ``python -c CODE``, in ``folder``, with XLA's
    default optimisation (the default test run turns most of it off, which made
    the README's 2000 GD steps and flow take 10 CPU-minutes instead of 20 s)."""
    return subprocess.run(
        [sys.executable, "-c", block.code],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=folder,
        env=clean_env() | {"JAX_DISABLE_MOST_OPTIMIZATIONS": "0"},
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--no-frameworks",
        action="store_true",
        help="skip the blocks that import an optional framework ("
        + ", ".join(FRAMEWORKS)
        + ")",
    )
    parser.add_argument("--only", nargs="*", help="run only blocks of these ids")
    args = parser.parse_args(argv)
    failed = 0
    for block in all_blocks():
        where = f"{block.path}:{block.line} ({block.heading})"
        if args.only and block.id not in args.only:
            continue
        if block.fragment:
            compile(block.code, where, "exec")
            print(f"compiled  {where}")
            continue
        if args.no_frameworks and block.frameworks:
            print(f"skipped   {where}: needs {', '.join(block.frameworks)}")
            continue
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as folder:
            out = run_block(block, Path(folder))
        took = time.perf_counter() - start
        ok = out.returncode == 0 and out.stdout.strip()
        print(f"{'ran' if ok else 'FAILED':9} {where} in {took:.1f} s", flush=True)
        if not ok:
            failed += 1
            print(out.stdout[-3000:], out.stderr[-3000:], sep="\n", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
