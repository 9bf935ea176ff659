"""Stage rules that read the right input (issue 58, point 1: stage rules), where
the constructed-signal tests of tests/test_stages.py, test_head_observables.py and
test_online_stages.py leave a one-line bug through.
"""

import numpy as np

from gflow.analysis import turning_points


def test_a_zigzags_first_move_is_confirmed_by_the_threshold_where_it_is():
    """With a threshold per index, the first move away from x[0] is confirmed by
    the threshold at the index that reaches it, not by x[0]'s: a rise of 1 under
    thresholds 10 (at 0) and 0.3 (after) is a turning point; a rise of 0.1 under
    0.01 (at 0) and 1 (after) is none.

    Catches the first move's threshold read at index 0."""
    rise = np.array([0.0, 0.5, 1.0, 0.6, 0.2])
    assert turning_points(rise, np.array([10, 0.3, 0.3, 0.3, 0.3])) == [0, 2, 4]
    small = np.array([0.0, 0.05, 0.1, 0.05, 0.0])
    assert turning_points(small, np.array([0.01, 1, 1, 1, 1])) == [0, 4]
