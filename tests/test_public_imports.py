"""Tests, experiments and benchmarks reach gflow only through its public names.

Module paths are private, so that files can move: a script imports ``gflow`` or a
public package (``from gflow.analysis import detect_stages``), never a module
(``from gflow.analysis.stages import detect_stages``). Each public package
re-exports what it offers (``from gflow.x.module import Name as Name``) and lists it
in ``__all__``. Checked here, by reading every .py file under tests/, experiments/
and benchmarks/ with ``ast`` (nothing is imported from the scripts):

- no import names a module below a public package, and no attribute chain such as
  ``gflow.dynamics.flow.solve_flow`` reaches into one;
- the same holds for code held in strings (a script a test or benchmark runs in a
  fresh process, ``python -c CODE``): every string constant that parses as Python
  and imports something is checked as a script of its own;
- every name imported from (or reached as an attribute of) a public package is in its
  ``__all__``, and every name in each ``__all__`` exists;
- the public packages below ``gflow.plotting`` do not import matplotlib.

``CHECKED`` lists the sub-packages held to this, ``NESTED`` the public packages
inside them. Monkeypatching a module attribute on purpose needs the module, not an
import: pass the target as a string
(``monkeypatch.setattr("gflow.text.corpus._load_hub", stub)``), which is not checked.
A test of a private helper imports it from its module only through
``PRIVATE_IMPORTS``, and a test that wraps a private function it patches imports the
module only through ``MODULE_IMPORTS``; keep both lists short.
"""

import ast
import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
SCRIPT_DIRS = ("tests", "experiments", "benchmarks")

#: The sub-packages whose modules scripts may not import.
CHECKED = (
    "gflow.problems",
    "gflow.dynamics",
    "gflow.analysis",
    "gflow.text",
    "gflow.runs",
    "gflow.monitor",
    "gflow.plotting",
    "gflow.cli",
)
#: Packages inside a checked one that re-export their own names: public as well.
NESTED = (
    "gflow.dynamics.solvers",
    "gflow.dynamics.references",
    "gflow.runs.train",
    "gflow.runs.text",
    # the monitor's framework adapters: public modules, each importing its optional
    # library, so that gflow.monitor imports none of them
    "gflow.monitor.pytorch",
    "gflow.monitor.huggingface",
    "gflow.monitor.flax_nnx",
)
PUBLIC = CHECKED + NESTED

#: (file, module, private name): the only imports of a module path allowed.
PRIVATE_IMPORTS = {
    ("tests/test_flow.py", "gflow.dynamics.flow", "_progress_meter"),
    ("tests/test_subword.py", "gflow.text.subword", "_chunks"),
    # in the script that checks a solve's program in a fresh process
    ("tests/test_compile_cache.py", "gflow.cli.compile_cache", "_errors_as_nan"),
    ("tests/test_compile_cache.py", "gflow.dynamics.flow", "_solve"),
}
#: Files whose strings are examples for the guards (this one's, test_public_api's),
#: not code that runs: not read.
EXAMPLE_STRINGS = {"tests/test_public_imports.py", "tests/test_public_api.py"}
#: (file, module): the only module objects imported, each to wrap (call the real one
#: from the stub) a private function the test monkeypatches on it.
MODULE_IMPORTS = {
    ("tests/test_text_resume.py", "gflow.runs.text.run"),  # _arm
    # head_cross_entropy, BLOCKED_MIN_VOCAB
    ("tests/test_cross_entropy.py", "gflow.problems.losses"),
}


def _scripts() -> list[Path]:
    return sorted(p for d in SCRIPT_DIRS for p in (ROOT / d).rglob("*.py"))


def _code_in_strings(tree: ast.Module) -> list[ast.Module]:
    """The code held in ``tree``'s string constants: each string that parses as
    Python (after ``textwrap.dedent``) and imports something, numbered by the lines
    of the file, then the code in its own strings. A string that does not parse
    whole (a template with ``{placeholders}``) gives its import lines one by one."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        text = textwrap.dedent(node.value)
        if "import" not in text:
            continue
        try:
            pieces = [(ast.parse(text), 0)]
        except (SyntaxError, ValueError):
            pieces = []
            for i, line in enumerate(text.splitlines()):
                if line.lstrip().startswith(("import ", "from ")):
                    try:
                        pieces.append((ast.parse(line.strip()), i))
                    except SyntaxError:
                        continue
        for code, line in pieces:
            ast.increment_lineno(code, node.lineno - 1 + line)
            if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(code)):
                out.append(code)
            out += _code_in_strings(code)
    return out


def _trees(rel: str, source: str) -> list[ast.Module]:
    """The script at ``rel`` and the code in its strings (``_code_in_strings``)."""
    tree = ast.parse(source, rel)
    return [tree] + ([] if rel in EXAMPLE_STRINGS else _code_in_strings(tree))


def _checked(module: str) -> bool:
    return any(module == c or module.startswith(c + ".") for c in CHECKED)


def _exports(package: str) -> set[str]:
    return set(importlib.import_module(package).__all__)


def _dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"]; None for anything but names and attributes."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _offences(rel: str, tree: ast.Module) -> list[str]:
    """Where the script at ``rel`` uses a module path or a name outside ``__all__``."""
    out = []
    # names bound to gflow or a public package: their attribute chains are checked
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] != "gflow":
                    continue
                if (rel, a.name) in MODULE_IMPORTS:
                    continue
                if _checked(a.name) and a.name not in PUBLIC:
                    out.append(f"{rel}:{node.lineno}: import {a.name}: a module path")
                elif a.asname:
                    aliases[a.asname] = a.name
                else:
                    aliases["gflow"] = "gflow"
        elif isinstance(node, ast.ImportFrom) and node.module:
            module = node.module
            if module == "gflow":
                for a in node.names:
                    if f"gflow.{a.name}" in PUBLIC:
                        aliases[a.asname or a.name] = f"gflow.{a.name}"
                continue
            if not _checked(module):
                continue
            if module not in PUBLIC:
                for a in node.names:
                    if (rel, module, a.name) not in PRIVATE_IMPORTS:
                        out.append(
                            f"{rel}:{node.lineno}: from {module} import {a.name}: a "
                            f"module path (import it from its public package)"
                        )
                continue
            exports = _exports(module)
            for a in node.names:
                if a.name not in exports:
                    out.append(
                        f"{rel}:{node.lineno}: from {module} import {a.name}: not in "
                        f"{module}.__all__"
                    )
                elif f"{module}.{a.name}" in PUBLIC:
                    aliases[a.asname or a.name] = f"{module}.{a.name}"
    # a chain is checked once, from its outermost attribute
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or id(node) in inner:
            continue
        parts = _dotted(node)
        if parts is None or parts[0] not in aliases:
            continue
        package, rest = aliases[parts[0]], parts[1:]
        # walk down through public packages; the first other step must be exported
        while rest and f"{package}.{rest[0]}" in PUBLIC:
            package, rest = f"{package}.{rest[0]}", rest[1:]
        if _checked(package) and rest and rest[0] not in _exports(package):
            out.append(
                f"{rel}:{node.lineno}: {'.'.join(parts)}: {rest[0]} is not in "
                f"{package}.__all__"
            )
    return out


def test_scripts_import_only_public_names():
    offences = []
    for path in _scripts():
        rel = str(path.relative_to(ROOT))
        for tree in _trees(rel, path.read_text()):
            offences += _offences(rel, tree)
    assert offences == [], "\n".join(offences)


_IN_STRINGS = '''\
import subprocess
from gflow.runs import FlowConfig
CHILD = r"""
import gflow
from gflow.runs.flow_run import FlowConfig
gflow.dynamics.flow.solve_flow
"""
TEMPLATE = """
    out = {out!r}
    from gflow.text.corpus import load_corpus
    from gflow.text import load_corpus
"""
NESTED = """X = 'import gflow.analysis.stages'"""
PATCH = "gflow.text.corpus._load_hub"  # a monkeypatch target: not code
'''


def test_the_check_reads_code_in_strings():
    """A script run from a string (``python -c CODE``) is held to the rule as well:
    benchmarks/compile.py's child imported ``gflow.runs.flow_run`` unseen."""
    trees = _trees("x.py", _IN_STRINGS)
    found = [o for tree in trees for o in _offences("x.py", tree)]
    assert [f.split(":")[1] for f in found] == ["5", "6", "10", "13"], found
    assert "from gflow.runs.flow_run import FlowConfig" in found[0]
    # this file's strings are examples of offences, not code
    assert len(_trees("tests/test_public_imports.py", _IN_STRINGS)) == 1


def test_the_check_finds_module_paths_and_unexported_names():
    tree = ast.parse(
        "import gflow\n"
        "import gflow.analysis.stages as st\n"
        "from gflow.analysis.stages import detect_stages\n"
        "from gflow.analysis import no_such_name, detect_stages\n"
        "from gflow.dynamics.flow import _progress_meter\n"
        "from gflow.runs.flow_run import FlowConfig\n"
        "from gflow import plotting as p\n"
        "gflow.dynamics.flow.solve_flow\n"
        "gflow.dynamics.solvers.RKC2\n"
        "gflow.solve_flow\n"
        "p.save_figure, p.figure\n"
    )
    found = _offences("x.py", tree)
    assert [f.split(":")[1] for f in found] == ["2", "3", "4", "5", "6", "8", "11"], (
        found
    )
    # the private helper is allowed in the one file that lists it
    private = ast.parse("from gflow.dynamics.flow import _progress_meter\n")
    assert _offences("tests/test_flow.py", private) == []


def test_the_private_imports_are_private_and_still_made():
    """Each entry of ``PRIVATE_IMPORTS`` is an underscore name its file imports
    (or code in its strings does), and a test's: scripts that users read, the
    benchmarks and experiments, make do with the public names."""
    for rel, module, name in sorted(PRIVATE_IMPORTS):
        assert name.startswith("_"), name
        assert rel.startswith("tests/"), f"{rel}: use or add a public name"
        imports = [
            (node.module, a.name)
            for tree in _trees(rel, (ROOT / rel).read_text())
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            for a in node.names
        ]
        assert (module, name) in imports, f"{rel} no longer imports {name}: drop it"


def test_the_module_imports_are_still_made():
    """Each entry of ``MODULE_IMPORTS`` is a module its file still imports."""
    for rel, module in sorted(MODULE_IMPORTS):
        imports = [
            a.name
            for node in ast.walk(ast.parse((ROOT / rel).read_text()))
            if isinstance(node, ast.Import)
            for a in node.names
        ]
        assert module in imports, f"{rel} no longer imports {module}: drop it"


@pytest.mark.parametrize("package", PUBLIC)
def test_every_name_in_all_exists(package):
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []
    assert len(module.__all__) == len(set(module.__all__)), "a name listed twice"


@pytest.mark.slow  # CI's slow steps: keeps the default run within 3 minutes
def test_the_packages_below_plotting_do_not_import_matplotlib():
    below = [p for p in PUBLIC if not p.startswith("gflow.plotting")]
    code = (
        f"import sys\nfor p in {below!r}:\n    __import__(p)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_docs_index_lists_every_public_package():
    """docs/index.md's "Public packages" table has one row per public package (and
    ``gflow`` itself) saying what it offers, and names no other."""
    text = (ROOT / "docs" / "index.md").read_text()
    assert "\n## Public packages\n" in text, "docs/index.md: no Public packages"
    section = text.split("\n## Public packages\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`gflow"):
            rows[cells[0].strip("`")] = cells[1]
    assert sorted(rows) == sorted(("gflow", *PUBLIC)), sorted(rows)
    assert all(len(offers.split()) >= 4 for offers in rows.values()), rows
