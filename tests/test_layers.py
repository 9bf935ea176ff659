"""The package's shape: layers that import downward, no cycles, one concept a file.

The layer contract lives in pyproject.toml ([tool.importlinter]); this file runs it
and adds what a layers contract cannot say: no import cycle anywhere (imports
inside functions included), at most ten modules directly in ``gflow/``, no family of
three or more modules named ``<concept>_*`` side by side (a concept that outgrows
its file becomes a sub-package, never a row of prefixed files), and no underscore
(private) name imported from another module.
"""

import ast
from pathlib import Path

import grimp
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
        "gflow.cli.commands"
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


# Families that predate the rule, each to become a sub-package (as gflow/runs/text/
# and gflow/runs/train/ did); whoever makes one a sub-package removes its line here,
# and test_known_families_are_still_families fails on a line left behind. Empty now.
KNOWN_FAMILIES: set[str] = set()


def _families(names: list[str]) -> dict[str, list[str]]:
    """The module names of one package grouped by the concept before their first
    underscore (``text`` holds ``text.py`` and ``text_*.py``), families of three or
    more only; a leading underscore (a private module) is not a concept boundary."""
    groups: dict[str, list[str]] = {}
    for name in names:
        if name == "__init__" or "_" not in name.lstrip("_"):
            continue
        groups.setdefault(name.lstrip("_").split("_")[0], []).append(name)
    for name in names:  # the concept's own module, when there is one, joins it
        if name in groups:
            groups[name].append(name)
    return {k: sorted(v) for k, v in sorted(groups.items()) if len(v) >= 3}


def _package_families() -> dict[str, list[str]]:
    out = {}
    for folder in sorted({p.parent for p in PACKAGE.rglob("*.py")}):
        stems = sorted(p.stem for p in folder.glob("*.py"))
        for concept, members in _families(stems).items():
            out[f"{folder.relative_to(ROOT).as_posix()}: {concept}"] = members
    return out


def test_family_finder_finds_a_family():
    names = ["__init__", "text", "text_config", "text_files", "train_run", "flow"]
    assert _families(names) == {"text": ["text", "text_config", "text_files"]}
    assert _families(["a_x", "a_y", "_a_z", "b_x", "b_y"]) == {
        "a": ["_a_z", "a_x", "a_y"]
    }
    assert _families(["text_config", "text_files", "train_run"]) == {}


def test_a_concept_that_outgrows_its_file_is_a_sub_package():
    new = {k: v for k, v in _package_families().items() if k not in KNOWN_FAMILIES}
    assert new == {}, "make each family a sub-package: " + repr(new)


def test_known_families_are_still_families():
    assert KNOWN_FAMILIES <= set(_package_families()), (
        "remove the families that are sub-packages now from KNOWN_FAMILIES"
    )


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
