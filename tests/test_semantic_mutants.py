"""The semantic-mutant list stays valid as the code changes (issue 58, point 2).

``python -m tests.mutation.semantic`` plants each listed one-line bug in a scratch
copy; a bug whose original text no longer occurs exactly once in its file could not
be planted (or would be planted in the wrong place), so this fast default-run check
fails first and names it.
"""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "tests" / "mutation" / "semantic_mutants.json"


def _harness():
    spec = importlib.util.spec_from_file_location(
        "mutation_semantic", ROOT / "tests" / "mutation" / "semantic.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_list_parses_and_has_at_least_60_distinct_mutants():
    mutants = json.loads(LIST.read_text())["mutants"]
    assert len(mutants) >= 60
    ids = [m["id"] for m in mutants]
    assert len(ids) == len(set(ids))
    for m in mutants:
        assert set(m) >= {"id", "file", "original", "replacement", "why"}, m
        assert m["file"].startswith("gflow/") and m["file"].endswith(".py"), m["id"]
        assert m["original"] != m["replacement"] and m["why"].strip(), m["id"]


def test_each_original_occurs_once_and_the_mutant_still_parses():
    harness = _harness()
    for m in [*harness.load_mutants(LIST), *harness.CONTROLS]:
        text = (ROOT / m["file"]).read_text()
        assert text.count(m["original"]) == 1, (m["id"], text.count(m["original"]))
        ast.parse(harness.plant(text, m))  # a planted mutant is valid Python


def test_every_mutated_module_has_related_tests_that_exist():
    harness = _harness()
    for file in {m["file"] for m in harness.load_mutants(LIST)}:
        related = harness.RELATED.get(file)
        assert related, f"{file}: no related tests for the quick kill"
        for name in related:
            assert (ROOT / "tests" / name).is_file(), (file, name)
    assert set(harness.EQUIVALENT) <= {m["id"] for m in harness.load_mutants(LIST)}
