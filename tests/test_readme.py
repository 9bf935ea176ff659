"""The README's Python examples run as printed (the deep-model one is slow)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = (Path(__file__).parent.parent / "README.md").read_text()


def _block(heading: str) -> str:
    match = re.search(rf"## {heading}\n.*?```python\n(.*?)```", README, re.S)
    assert match, f"no python block under '## {heading}'"
    return match.group(1)


@pytest.mark.slow
@pytest.mark.parametrize(
    "heading",
    ["Python in ten lines", "Deep models in Python", "Monitor a training loop"],
)
def test_readme_example_runs_in_a_fresh_process(heading, tmp_path):
    # in a fresh folder: the examples write their runs under the working directory,
    # and a second run of this test must not find the first one's monitor there
    out = subprocess.run(
        [sys.executable, "-c", _block(heading)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()
