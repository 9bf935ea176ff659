"""experiments/practical_page.py: the page's parts run in order, each with the
flags that make its block, the hours-long fair test only on request, and a failed
part stops the rest."""

import json

from experiments import practical_page as pp


def _fake(codes):
    calls = []

    def runner(argv):
        calls.append(argv[1:])
        return codes.get(len(calls), 0)

    return calls, runner


def test_every_part_runs_in_order_and_the_fair_test_only_rewrites_its_block(tmp_path):
    calls, runner = _fake({})
    records = pp.build(runner=runner, out=tmp_path)
    scripts = [(c[0].rsplit("/", 1)[-1], c[1:]) for c in calls]
    assert scripts == [
        ("stage_controls.py", ["--ladder"]),
        ("stage_controls.py", ["--text"]),
        ("ladder_flow.py", []),
        ("fair_text_test.py", ["--doc-only"]),
    ]
    assert [r["rc"] for r in records] == [0] * 4
    logged = json.loads((tmp_path / "summary.json").read_text().splitlines()[-1])
    assert [p["part"] for p in logged["parts"]] == [p.name for p in pp.PARTS]


def test_flags_pass_through_and_the_fair_test_runs_when_asked(tmp_path):
    calls, runner = _fake({})
    pp.build(runner=runner, out=tmp_path, with_fair_text=True)
    assert calls[-1][1:] == []
    calls, runner = _fake({})
    pp.build(runner=runner, out=tmp_path, doc_only=True)
    assert all(c[-1] == "--doc-only" for c in calls)
    calls, runner = _fake({})
    pp.build(runner=runner, out=tmp_path / "quick", quick=True)
    assert all("--quick" in c and "--doc-only" not in c for c in calls)
    assert not (tmp_path / "quick").exists()  # a smoke run leaves no record


def test_a_failed_part_stops_the_rest(tmp_path, capsys):
    calls, runner = _fake({3: 2})
    records = pp.build(runner=runner, out=tmp_path)
    assert len(calls) == 3 and records[-1]["rc"] == 2
