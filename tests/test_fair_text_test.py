"""experiments/fair_text_test.py: its counts on hand-made run directories, its
command line against ``gflow text``'s parser, and (slow) its quick path."""

import json
from pathlib import Path

import numpy as np
import pytest

from experiments import fair_text_test as ft
from gflow.cli import build_parser

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def _move(phase, key, t, self_=False):
    return {
        "phase": phase,
        "key": key,
        "self": self_,
        "t_start": t,
        "t_end": t + 10,
        "mass_before": 0.1,
        "mass_after": 0.5,
    }


def _cell(root: Path, name: str, seed: int, moves: dict, status="success"):
    out = root / name
    out.mkdir(parents=True)
    stats = {"grad_evals": 100 + seed, "t_reached": 1800.0, "wall_s": 60.0}
    flow = {"status": status, "stats": stats, "info": {"seed": seed}}
    (out / "flow.json").write_text(json.dumps(flow))
    (out / "row_phases.json").write_text(json.dumps({"flow": moves}))
    np.savez(out / "flow_metrics.npz", loss=np.array([8.0, 7.0, 6.0]))


def test_halves_need_a_dilution_from_the_key_focused_on_after_the_focus():
    f_the, d_the = _move("focus", "▁the", 10), _move("dilution", "▁the", 20)
    assert ft.halves([f_the, d_the])
    assert not ft.halves([d_the, f_the])  # the wrong order
    assert not ft.halves([f_the, _move("dilution", "▁a", 20)])  # another key
    assert not ft.halves([])


def test_counts_and_block_read_the_run_directories(tmp_path):
    s = ft.Settings(text_seeds=(0, 1, 2), control_seeds=(0,))
    paper = [  # D, F▁, D, Fself: all four steps
        _move("dilution", "▁", 5),
        _move("focus", "▁", 10),
        _move("dilution", "▁", 20),
        _move("focus", "▁the", 30, self_=True),
    ]
    _cell(tmp_path, ft.run_name(s, False, 0), 0, {"▁the": paper, "▁a": []})
    cycle = [_move("focus", "▁the", 900, True), _move("dilution", "▁the", 950, True)]
    _cell(tmp_path, ft.run_name(s, False, 1), 1, {"▁the": cycle, "▁a": []})
    # an unfinished seed is left out, not counted as a seed without moves
    _cell(tmp_path, ft.run_name(s, False, 2), 2, {"▁the": []}, status="max_steps")
    _cell(tmp_path, ft.run_name(s, True, 0), 0, {"▁the": [cycle[0]]})

    text = ft.cells(s, False, tmp_path)
    assert [c["seed"] for c in text] == [0, 1]
    assert text[0]["first_move"] == 5 and text[0]["loss"] == (8.0, 6.0)
    counts = ft.row_counts(text, "▁the")
    assert counts["seeds"] == 2
    assert counts["focus"] == 2 and counts["dilution"] == 2
    assert counts["halves"] == 2  # F▁ then D▁ in seed 0, Fself then Dself in seed 1
    assert counts["in_order"] == [4, 1]

    page = ft.block(s, tmp_path)
    line = next(x for x in page.splitlines() if x.startswith("| ▁the | 2/2 | 1/1"))
    assert line.rstrip().endswith("| 4, 1 | 1/2 |")
    assert "s1: Fself@900 (0.10→0.50) Dself@950 (0.10→0.50)" in page
    assert "| ▁a | 0/2 | – |" in page  # the control does not track ▁a


def test_the_block_says_so_when_nothing_has_finished(tmp_path):
    assert ft.block(ft.Settings(), tmp_path).startswith("No finished run")


@pytest.mark.parametrize("settings", [ft.Settings(), ft.ISOLATED, ft.QUICK])
def test_each_cell_is_a_valid_gflow_text_command(settings, tmp_path):
    args = build_parser().parse_args(
        ["text", *ft.argv(settings, tmp_path / "c.txt", 3, tmp_path / "run")]
    )
    assert args.seed == 3 and args.whitespace == settings.mode
    assert args.steps * args.lr == pytest.approx(settings.t1)


def test_isolated_rows_drop_the_glued_space():
    assert ft.ISOLATED.rows() == ("▁", "the", "a", "full", "been", "continue")


@pytest.mark.slow
@pytest.mark.skipif(
    not (DATA / "tinystories").exists(), reason="../shared/data is absent"
)
def test_quick_path_runs_text_and_control_and_resumes(tmp_path, capsys):
    assert ft.main(["--quick", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| text | 0 | 20 |" in out and "| shuffled | 0 | 20 |" in out
    assert ft.main(["--quick", "--root", str(tmp_path), "--doc-only"]) == 0
    ft.main(["--quick", "--root", str(tmp_path)])
    assert "read back" in capsys.readouterr().out
