"""The tracked rows are measured on extra windows ending at each query
(``query_windows``, ``--row-windows``), so a rare query's row is defined."""

import json

import jax
import numpy as np
import pytest

from gflow import AttentionModel
from gflow.cli import build_parser
from gflow.text import TextObservables, fixed_sample, query_windows


def test_query_windows_end_at_their_query_and_are_slices_of_the_stream():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 5, size=400)
    ids[[50, 120, 390]] = 7  # a rare query, three occurrences that end a window
    ids[[2, 399]] = 7  # no full context before 2, no target after 399
    w = query_windows(ids, [7, 2], length=6, per_query=10)
    n7 = int(np.sum(w[:, -2] == 7))
    assert n7 == 3
    assert np.all(w[:n7, -2] == 7) and np.all(w[n7:, -2] == 2)
    assert w.shape == (n7 + 10, 7) and w.dtype == np.int32
    for row in w:  # each a window of the stream
        starts = np.flatnonzero(
            np.lib.stride_tricks.sliding_window_view(ids, 7).__eq__(row).all(axis=1)
        )
        assert starts.size >= 1
    twos = w[n7:]
    ends = np.flatnonzero(ids[5:-1] == 2) + 5  # the ends of all windows at 2
    assert twos[0, -2] == 2 and np.array_equal(twos[0], ids[ends[0] - 5 : ends[0] + 2])
    assert np.array_equal(twos[-1], ids[ends[-1] - 5 : ends[-1] + 2])  # spread out
    assert np.array_equal(w, query_windows(ids, [7, 2], length=6, per_query=10))
    assert query_windows(ids, [9], length=6, per_query=4).shape == (0, 7)
    assert query_windows(ids, [2], length=6, per_query=0).shape == (0, 7)
    with pytest.raises(ValueError, match="per_query"):
        query_windows(ids, [2], length=6, per_query=-1)


@pytest.mark.slow
def test_row_windows_enter_the_rows_only():
    """With row windows, the rows are those of the sample and the extra windows
    together; the means over all windows stay those of the sample."""
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 6, size=300).astype(np.int32)
    ids[::37] = 6  # query 6 is rare
    sample = fixed_sample(ids, length=5, num=20)
    extra = query_windows(ids, [6, 1], length=5, per_query=8)
    model = AttentionModel.init(
        d_vocab=7, d_model=4, init_scale=0.5, key=jax.random.key(0)
    )
    both = TextObservables(sample, [6, 1], [0], d_vocab=7, row_windows=extra)(model)
    alone = TextObservables(sample, [6, 1], [0], d_vocab=7)(model)
    joined = TextObservables(np.concatenate([sample, extra]), [6, 1], [0], d_vocab=7)(
        model
    )
    np.testing.assert_allclose(both["attention_rows"], joined["attention_rows"])
    assert np.all(np.isfinite(both["attention_rows"]))
    for k in ("attention_entropy", "attention_on_top"):
        np.testing.assert_allclose(both[k], alone[k], rtol=1e-6)
        assert not np.allclose(joined[k], alone[k], rtol=1e-6)


def test_row_windows_option_reaches_the_configuration():
    from gflow.cli import resolve
    from gflow.runs.text import TextJob

    def cfg(*argv):
        args = build_parser().parse_args(["text", "--corpus", "c.txt", *argv])
        return resolve(TextJob(), args).cfg

    assert cfg("--row-windows", "3").row_windows == 3
    assert cfg().row_windows == 32
    assert json.dumps(cfg("--row-windows", "3").to_json()["track"]) == "[]"


@pytest.mark.slow  # two float64 flows compiled: ~30 s on 2 cores
def test_text_flow_takes_a_stiff_solver(tmp_path):
    """--method flow --solver rkc2 integrates the same flow as Tsit5: at tight
    tolerances both end at the same parameters, and the run records its solver."""
    from gflow.cli import main
    from gflow.runs import load_trajectory
    from tests.test_text_cli import _story

    corpus = _story(tmp_path / "story.txt")
    finals = {}
    for solver in ("tsit5", "rkc2"):
        out = tmp_path / solver
        argv = [
            "--quiet",
            "text",
            "--corpus",
            str(corpus),
            "--vocab-size",
            "8",
            "--context",
            "6",
            "--windows",
            "32",
            "--method",
            "flow",
            "--solver",
            solver,
            "--lr",
            "0.5",
            "--steps",
            "40",
            "--rtol",
            "1e-8",
            "--atol",
            "1e-10",
            "--opt-steps",
            "0",
            "--num-saves",
            "4",
            "--num-queries",
            "1",
            "--init-scale",
            "0.1",
            "--out",
            str(out),
        ]
        assert main(argv) == 0
        traj = load_trajectory(out, name="flow")
        assert solver.lower() in json.dumps(traj.info).lower()
        finals[solver] = traj
    a, b = finals["tsit5"], finals["rkc2"]
    assert a.metrics["loss"][-1] < a.metrics["loss"][0] - 1e-3  # it moved
    np.testing.assert_allclose(b.final.W_E, a.final.W_E, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(b.metrics["loss"], a.metrics["loss"], rtol=1e-6)
    assert not np.array_equal(b.final.W_E, a.final.W_E)  # two solvers ran
