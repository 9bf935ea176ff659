"""What the experiments share to write their findings into docs/*.md: a markdown
table, a generated block between two markers, and the machine's load line.

Each experiment renders its own rows; these helpers only frame them, so a page's
generated block is rewritten in place and the prose around it is never touched.
"""

import os
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path


def row(cells: Iterable[object]) -> str:
    """One markdown table row: ``| a | b |``."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


def table(
    header: Sequence[str], rows: Iterable[Iterable[object]], *, rule: str = ""
) -> str:
    """A markdown table without a final newline: the header, the rule under it
    (default ``|---|`` per column) and one line per row of cells."""
    lines = [row(header), rule or "|" + "---|" * len(header)]
    return "\n".join(lines + [row(r) for r in rows])


def replace_block(
    doc: Path, start: str, end: str, text: str, *, append: bool = False
) -> None:
    """Put ``text`` between the ``start`` and ``end`` markers of ``doc`` (a newline
    after ``start``; ``text`` ends with its own). A doc without the markers is an
    error, or with ``append=True`` gets them appended at its end first."""
    body = doc.read_text()
    if start not in body or end not in body:
        if not append:
            raise ValueError(f"{doc} lacks the markers {start} ... {end}")
        body = body.rstrip("\n") + f"\n\n{start}\n{end}\n"
    i, j = body.index(start) + len(start), body.index(end)
    doc.write_text(body[:i] + "\n" + text + body[j:])


def uptime() -> str:
    """The output of ``uptime``, or the load averages where it cannot run."""
    try:
        return subprocess.run(
            ["uptime"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def publish(text: str, *, quick: bool, doc: Path, start: str, end: str) -> None:
    """A generated block: printed after a quick run (the page keeps the full
    run's), else put between the ``start`` and ``end`` markers of ``doc``."""
    if quick:
        print(text)
    else:
        replace_block(doc, start, end, text, append=True)
