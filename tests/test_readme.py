"""The Python examples of the README and the docs run as printed (slow: a minute
or two each, in a fresh process)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent

# (file, heading): every ```python block under each heading is run
EXAMPLES = [
    ("README.md", "Python in ten lines"),
    ("docs/concepts.md", "Deep models in Python"),
    ("docs/concepts.md", "The flow of a standard block"),
    ("docs/monitor.md", "Monitor a training loop"),
    ("docs/monitor.md", "From PyTorch"),
    ("docs/monitor.md", "From Hugging Face"),
    ("docs/monitor.md", "From Flax"),
    ("docs/monitor.md", "From NumPy"),
]


def python_blocks(text: str, heading: str) -> list[str]:
    """The ```python blocks of the section under ``heading`` (any level), up to the
    next heading of the same or a higher level."""
    lines = text.splitlines(keepends=True)
    level, start = None, None
    for i, line in enumerate(lines):
        m = re.match(r"(#+) (.*?)\s*$", line)
        if m and m.group(2) == heading:
            level, start = len(m.group(1)), i + 1
            break
    assert start is not None, f"no heading '{heading}'"
    body = []
    fenced = False
    for line in lines[start:]:
        fenced ^= line.startswith("```")
        m = re.match(r"(#+) ", line)
        if m and not fenced and len(m.group(1)) <= level:
            break
        body.append(line)
    return re.findall(r"^```python\n(.*?)^```", "".join(body), re.S | re.M)


def test_python_blocks_reads_one_section():
    text = (
        "# T\n## A\nx\n```python\na = 1\n```\n### A.1\n```python\nb = 2\n```\n"
        "```bash\nc\n```\n## B\n```python\nd = 3\n```\n"
    )
    assert python_blocks(text, "A") == ["a = 1\n", "b = 2\n"]
    assert python_blocks(text, "A.1") == ["b = 2\n"]
    assert python_blocks(text, "B") == ["d = 3\n"]
    with pytest.raises(AssertionError, match="no heading"):
        python_blocks(text, "C")


@pytest.mark.parametrize("path, heading", EXAMPLES)
def test_every_example_is_found(path, heading):
    assert len(python_blocks((ROOT / path).read_text(), heading)) == 1


@pytest.mark.slow
@pytest.mark.parametrize("path, heading", EXAMPLES)
def test_example_runs_in_a_fresh_process(path, heading, tmp_path):
    (code,) = python_blocks((ROOT / path).read_text(), heading)
    stories = ROOT.parent / "shared" / "data" / "tinystories" / "sample.txt"
    if "TINYSTORIES" in code and not stories.exists():
        pytest.skip("the shared TinyStories sample is not present")
    # in a fresh folder: the examples write their runs under the working directory,
    # and a second run of this test must not find the first one's monitor there
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "TINYSTORIES": str(stories)},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()
