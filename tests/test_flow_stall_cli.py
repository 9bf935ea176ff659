"""A flow that runs out of steps says where and why on the command line (issue 31
point 5), through the resumable segments too."""

import pytest

from gflow.cli import main


@pytest.mark.slow  # a short flow through the command line
@pytest.mark.parametrize("segments", ["1", "2"])
def test_a_stalled_flow_prints_where_it_stopped_and_what_to_try(
    tmp_path, capsys, segments
):
    out = tmp_path / "stall"
    argv = ["flow", "--t1", "400", "--max-steps", "30", "--segments", segments]
    main([*argv, "--out", str(out)])
    text = capsys.readouterr().out
    assert "flow max_steps" in text
    # the report names the segment it stopped in: [0, 400], or [0, 200] of two
    assert "the flow stopped at t = 21." in text and "of [0, " in text
    assert "Hessian's top eigenvalues" in text and "try: a larger max_steps" in text
