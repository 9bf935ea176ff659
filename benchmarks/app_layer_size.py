"""How big the application layer is: modules, lines and dict-returning functions.

The question (issue 56, point 4): is the application layer (gflow/cli and gflow/runs)
small and typed? Counts, over every ``.py`` file under those folders:

- modules in gflow/cli besides ``__init__``;
- lines (``wc -l``);
- dict-returning functions: every function, private ones included, whose return
  annotation names ``dict``, ``Dict``, ``Mapping`` or a ``TypedDict``, or which
  returns a dict literal or comprehension (``{...}``, ``dict(...)``) (issue 56's
  count); of those, how many are annotated as a mapping of named arrays or numbers
  (``dict[str, np.ndarray]``, ``dict[str, Array]``, ``dict[str, float]``: the
  columns of a checkpoint piece, metrics), which the issue allows.

Command: ``python benchmarks/app_layer_size.py [--list]`` (a second, no JAX).
Writes nothing; prints the counts (and with ``--list`` each function found).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("gflow/cli", "gflow/runs")
_DICT_NAMES = {"dict", "Dict", "Mapping", "MutableMapping", "TypedDict"}


def _names_dict(annotation: ast.expr | None, typed_dicts: set[str]) -> bool:
    """Whether a return annotation is a dict type (its outermost name)."""
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return False
    node = annotation
    if isinstance(node, ast.BinOp):  # ``dict | None``
        return _names_dict(node.left, typed_dicts) or _names_dict(
            node.right, typed_dicts
        )
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute):
        name = node.attr
    elif isinstance(node, ast.Name):
        name = node.id
    else:
        return False
    return name in _DICT_NAMES or name in typed_dicts


def _own_returns(fn: ast.AST):
    """The return statements of ``fn`` itself, not of functions nested in it."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Return):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _is_dict_literal(value: ast.expr | None) -> bool:
    if isinstance(value, (ast.Dict, ast.DictComp)):
        return True
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "dict"
    )


_NAMED_VALUES = {"ndarray", "Array", "float"}


def _named_values(annotation: ast.expr | None) -> bool:
    """Whether a return annotation is ``dict[str, X]`` with X an array or a float
    (``X | None`` around it included)."""
    if isinstance(annotation, ast.BinOp):
        return _named_values(annotation.left) or _named_values(annotation.right)
    if not (
        isinstance(annotation, ast.Subscript)
        and isinstance(annotation.slice, ast.Tuple)
    ):
        return False
    value = annotation.slice.elts[-1]
    name = value.attr if isinstance(value, ast.Attribute) else getattr(value, "id", "")
    return name in _NAMED_VALUES


def dict_functions(path: Path) -> list[str]:
    """``file:line name`` of each dict-returning function in ``path``."""
    tree = ast.parse(path.read_text())
    typed_dicts = {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and any(
            getattr(b, "id", getattr(b, "attr", "")) == "TypedDict" for b in node.bases
        )
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if _names_dict(node.returns, typed_dicts) or any(
            _is_dict_literal(r.value) for r in _own_returns(node)
        ):
            named = " (named arrays)" if _named_values(node.returns) else ""
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}{named}")
    return found


def measure(root: Path = ROOT) -> dict[str, object]:
    files = sorted(p for f in FOLDERS for p in (root / f).rglob("*.py"))
    cli = [p for p in (root / "gflow/cli").glob("*.py") if p.name != "__init__.py"]
    functions = [f for p in files for f in dict_functions(p)]
    return {
        "cli_modules": len(cli),
        "lines": sum(len(p.read_text().splitlines()) for p in files),
        "files": len(files),
        "dict_functions": functions,
    }


if __name__ == "__main__":
    m = measure()
    print(
        f"cli modules (besides __init__): {m['cli_modules']}\n"
        f"files: {m['files']}  lines: {m['lines']}\n"
        f"dict-returning functions: {len(m['dict_functions'])}, of which mappings "
        f"of named arrays: {sum('(named' in f for f in m['dict_functions'])}"
    )
    if "--list" in sys.argv:
        print("\n".join(m["dict_functions"]))
