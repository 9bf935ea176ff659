"""Shared pieces of the benchmarks that time whole commands in fresh processes
(no JAX imported here): the command line of a load-gated benchmark and the marked
block it writes into a document."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


def replace_block(doc: Path, start: str, end: str, text: str) -> None:
    """Put ``text`` between the ``start`` and ``end`` markers of ``doc`` (the markers
    are appended first when the document has none)."""
    body = doc.read_text()
    if start not in body:
        body = body.rstrip("\n") + f"\n\n{start}\n{end}\n"
    i, j = body.index(start) + len(start), body.index(end)
    doc.write_text(body[:i] + "\n" + text + body[j:])


def gated_main(
    description: str,
    run: Callable[..., object],
    write_docs: Callable[[], object],
    argv=None,
) -> int:
    """The command line of a load-gated benchmark: ``--quick`` (one repeat),
    ``--write-docs``, ``--doc-only`` and ``--max-wait``; calls
    ``run(repeats=, max_wait=)`` and then ``write_docs()``."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="one repeat")
    p.add_argument(
        "--write-docs",
        action="store_true",
        help="rewrite the block of BENCHMARKS.md (from the record alone with "
        "--doc-only)",
    )
    p.add_argument("--doc-only", action="store_true", help="do not measure")
    p.add_argument(
        "--max-wait",
        type=float,
        default=600.0,
        help="seconds to wait for the load to fall before each run (then it runs "
        "anyway, and the table leaves that run out)",
    )
    args = p.parse_args(argv)
    if not args.doc_only:
        run(repeats=1 if args.quick else 2, max_wait=args.max_wait)
    if args.write_docs or args.doc_only:
        write_docs()
    return 0
