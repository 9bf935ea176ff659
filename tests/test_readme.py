"""Every ```python block of README.md and docs/*.md runs as printed, or says it is a
fragment (```` ```python fragment ````) and compiles.

A runnable block runs in a fresh process, in an empty temporary folder outside the
checkout, with no environment variable pointing into the checkout or at
``../shared`` (``tests/doc_blocks.py`` finds the blocks and runs them; the text an
example trains on ships with gflow). The blocks of ``doc_blocks.FAST`` run in the
default suite (a few seconds each); the others (the deep and block flows, the
PyTorch, Hugging Face and Flax loops: a minute or two each) are slow.
"""

import pytest
from doc_blocks import FAST, FRAGMENT, ROOT, RUN, all_blocks, clean_env, python_blocks
from doc_blocks import run_block as run_doc_block
from optional import needs

BLOCKS = all_blocks()
RUNNABLE = [b for b in BLOCKS if not b.fragment]
FRAGMENTS = [b for b in BLOCKS if b.fragment]


def test_python_blocks_reads_fences_and_headings():
    text = (
        "# T\n## A\nx\n```python\na = 1\n```\n### A.1\n```python fragment\nb\n```\n"
        "```bash\n# not a heading\nc\n```\n```python\n# nor this\nd = 3\n```\n"
        "## B\n````python\ne = '''\n```\n'''\n````\n"
    )
    blocks = python_blocks(text, "x.md")
    assert [(b.heading, b.info, b.code, b.line) for b in blocks] == [
        ("A", "python", "a = 1\n", 4),
        ("A.1", "python fragment", "b\n", 8),
        ("A.1", "python", "# nor this\nd = 3\n", 15),
        ("B", "python", "e = '''\n```\n'''\n", 20),
    ]
    assert [b.fragment for b in blocks] == [False, True, False, False]


def test_every_block_is_an_example_or_a_fragment():
    """The fence says which: ```python (run) or ```python fragment (compiled)."""
    assert len(RUNNABLE) >= 7 and FRAGMENTS
    for b in BLOCKS:
        assert b.info in (RUN, FRAGMENT), f"{b.path}:{b.line}: fence {b.info!r}"


def test_block_ids_are_unique_and_fast_ones_exist():
    ids = [b.id for b in RUNNABLE]
    assert len(ids) == len(set(ids)), "two runnable blocks under one heading"
    assert FAST <= set(ids)
    assert not any(b.frameworks for b in RUNNABLE if b.id in FAST)


def test_no_block_reads_the_checkout_or_shared_data():
    for b in BLOCKS:
        for word in ("shared/data", "TINYSTORIES", "os.environ", "__file__"):
            assert word not in b.code, f"{b.path}:{b.line} reads {word}"


def test_the_environment_points_nowhere_into_the_checkout(monkeypatch):
    monkeypatch.setenv("TINYSTORIES", str(ROOT.parent / "shared" / "x.txt"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("HOME_OF_SOMETHING", "/elsewhere")
    env = clean_env()
    assert "TINYSTORIES" not in env and "PYTHONPATH" not in env
    assert env["HOME_OF_SOMETHING"] == "/elsewhere"


@pytest.mark.parametrize("block", FRAGMENTS, ids=lambda b: f"{b.path}:{b.line}")
def test_fragment_compiles(block):
    compile(block.code, f"{block.path}:{block.line}", "exec")


def _marks(block):
    return () if block.id in FAST else (pytest.mark.slow,)


@pytest.mark.parametrize(
    "block", [pytest.param(b, id=b.id, marks=_marks(b)) for b in RUNNABLE]
)
def test_example_runs_in_a_fresh_process(block, tmp_path):
    assert not tmp_path.resolve().is_relative_to(ROOT)
    # an empty folder: the examples write their runs under the working directory,
    # and a second run of this test must not find the first one's monitor there
    for name in block.frameworks:
        needs(name)
    out = run_doc_block(block, tmp_path)
    assert out.returncode == 0, out.stderr[-5000:]
    assert out.stdout.strip()
