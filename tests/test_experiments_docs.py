"""The experiments' doc writers: the markdown each renders from a small fixed input,
and the generated blocks they put between their markers, byte for byte as before
the shared code moved to experiments/_docs.py."""

import pytest

from experiments import (
    _docs,
    deep_cycle,
    departure,
    markov_cycle,
    markov_robustness,
    markov_saddle,
    monitor_training,
    optimizer_odes,
)

DOC = "# doc\n\nbefore\n{start}\nold\nlines\n{end}\nafter\n"


def test_table_renders_a_header_a_rule_and_rows():
    assert _docs.table(["a", "b"], [["1", ""], ["x|y", "**no**"]]) == (
        "| a | b |\n|---|---|\n| 1 |  |\n| x|y | **no** |"
    )
    assert _docs.table(["a", "b"], [], rule="| --- | ---: |") == (
        "| a | b |\n| --- | ---: |"
    )


def test_replace_block_replaces_between_the_markers_only(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(DOC.format(start="<!-- a -->", end="<!-- b -->"))
    _docs.replace_block(doc, "<!-- a -->", "<!-- b -->", "new\n")
    assert doc.read_text() == "# doc\n\nbefore\n<!-- a -->\nnew\n<!-- b -->\nafter\n"
    with pytest.raises(ValueError, match="lacks the markers <!-- c -->"):
        _docs.replace_block(doc, "<!-- c -->", "<!-- d -->", "x\n")
    _docs.replace_block(doc, "<!-- c -->", "<!-- d -->", "x\n", append=True)
    assert doc.read_text().endswith("after\n\n<!-- c -->\nx\n<!-- d -->\n")


def test_saddle_table():
    rows = [("a", "1", "2", "ok"), ("b|c", "—", "3.5", "**no**")]
    assert markov_saddle.table(rows) == (
        "| claim | predicted | measured | verdict |\n|---|---|---|---|\n"
        "| a | 1 | 2 | ok |\n| b|c | — | 3.5 | **no** |\n"
    )


def test_departure_table():
    sgd = {"lr": 0.1, "bound": 20.0, "predicted": 12.345678, "first_rise": None}
    sgd |= {"rises": 3, "steps": 600, "own_prediction": 11.0}
    sgd |= {"lambda_at_rise": 19.99, "drift_departure": None}
    adam = {"lr": 0.01, "bound": 38.0, "predicted": None, "first_rise": 2.5}
    adam |= {"rises": 0, "steps": 300, "own_prediction": None, "lambda_at_rise": None}
    results = {
        "sgd": {"t1": 60.0, "members": [sgd]},
        "adam": {"t1": 3.0, "members": [adam]},
    }
    assert departure.table(results) == (
        "| optimizer | η | c/η | predicted (flow λ_max > c/η) | first loss rise "
        "| rises / steps | own λ_max > c/η | own λ_max at the rise "
        "| d_η > 2(η/η₀)d_η₀ |\n|---|---|---|---|---|---|---|---|---|\n"
        "| sgd (t1=60) | 0.1 | 20 | 12.35 | — | 3 / 600 | 11 | 19.99 | — |\n"
        "| adam (t1=3) | 0.01 | 38 | — | 2.5 | 0 / 300 | — | — | — |\n"
    )


def test_optimizer_odes_table():
    def member(lr, status, error, final):
        return {"lr": lr, "status": status, "error": error, "final_error": final}

    results = {
        "config": {},
        "momentum": {
            "t1": 10.0,
            "order": 1.0123,
            "reference": {"gamma": 1.0},
            "members": [
                member(0.1, "success", 0.01, 0.005),
                member(0.05, "success", 0.005, 0.002),
            ],
        },
        "adam": {
            "t1": 1.0,
            "order": 0.99,
            "reference": {"gamma1": 10.0, "gamma2": 1000.0},
            "members": [member(0.0001, "diverged", 0.3, 0.4)],
        },
    }
    assert optimizer_odes.table(results) == (
        "| optimizer | η | β's | status | error = max_t dist to its ODE | ratio | "
        "final error |\n|---|---|---|---|---|---|---|\n"
        "| momentum (t1=10) | 0.1 | β=0.9 | success | 0.01 |  | 0.005 |\n"
        "| momentum (t1=10) | 0.05 | β=0.95 | success | 0.005 | 2 | 0.002 |\n"
        "| momentum: fitted order | **1.012** | | | | | |\n"
        "| adam (t1=1) | 0.0001 | β₁=0.999, β₂=0.9 | diverged | 0.3 |  | 0.4 |\n"
        "| adam: fitted order | **0.990** | | | | | |\n"
    )


@pytest.mark.parametrize(
    "write",
    [
        lambda doc, text: markov_saddle.write_docs(text, doc),
        lambda doc, text: markov_cycle.write_docs(text, doc),
    ],
    ids=["markov_saddle", "markov_cycle"],
)
def test_table_block_writers(write, tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(DOC.format(start="<!-- table:start -->", end="<!-- table:end -->"))
    write(doc, "| new |\n")
    assert doc.read_text() == (
        "# doc\n\nbefore\n<!-- table:start -->\n| new |\n<!-- table:end -->\nafter\n"
    )


@pytest.mark.parametrize("module", [monitor_training, deep_cycle])
def test_generated_block_writers(module, tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(DOC.format(start=module.START, end=module.END))
    module.write_doc("new\n", doc)
    assert doc.read_text() == (
        f"# doc\n\nbefore\n{module.START}\nnew\n{module.END}\nafter\n"
    )


def test_deep_cycle_writes_a_new_doc_when_it_has_no_block(tmp_path):
    doc = tmp_path / "doc.md"
    deep_cycle.write_doc("new\n", doc)
    assert doc.read_text() == (
        "# Deep models: the stage cycle per head (issue 14)\n\n"
        f"{deep_cycle.START}\nnew\n{deep_cycle.END}\n"
    )


def test_robustness_writer_appends_its_section(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("# title\n\ntext\n")
    markov_robustness.write_docs(doc, "first\n")
    assert doc.read_text() == (
        "# title\n\ntext\n\n## Robustness (issue 13.5)\n\n"
        f"{markov_robustness.START}\nfirst\n{markov_robustness.END}\n"
    )
