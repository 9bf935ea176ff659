"""The package's shape: layers that import downward, no cycles, small modules.

The layer contract lives in pyproject.toml ([tool.importlinter]); this file runs it
and adds what a layers contract cannot say: no import cycle anywhere (imports
inside functions included), at most ten modules directly in ``gflow/``, no module
over ~400 lines, and no underscore (private) name imported from another module.
"""

import ast
from pathlib import Path

import grimp
import pytest
from importlinter.cli import lint_imports

ROOT = Path(__file__).parent.parent
PACKAGE = ROOT / "gflow"


def test_layer_contract_holds():
    assert (
        lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0
    )


def _cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph.modules):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    graph = grimp.build_graph("gflow", cache_dir=None)
    # grimp sees imports inside functions too: check it on one we know of
    assert "gflow.plotting.text" in graph.find_modules_directly_imported_by(
        "gflow.cli.text"
    )
    assert _cycles(graph) == []


def test_cycle_finder_finds_a_cycle():
    class Graph:
        modules = {"a", "b", "c", "d"}
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

        def find_modules_directly_imported_by(self, m):
            return self.edges[m]

    assert _cycles(Graph()) == [["a", "b", "c"]]


def test_top_level_has_at_most_ten_modules():
    top = [p.name for p in PACKAGE.iterdir() if p.suffix == ".py"]
    assert len(top) <= 10, sorted(top)


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_module_is_small(path):
    assert len(path.read_text().splitlines()) <= 420


def test_no_private_name_is_imported_across_modules():
    offences = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "gflow"
            ):
                for alias in node.names:
                    if alias.name.startswith("_"):
                        offences.append(f"{path.relative_to(ROOT)}: {alias.name}")
    assert offences == []
