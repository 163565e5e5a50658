"""grader/running/worker/hint_check.py: tl.multiple_of / tl.max_contiguous / tl.max_constancy promises
checked against actual values (numpy, no Triton): runs, broken groups, undivisible starts."""

from __future__ import annotations

import numpy as np

from grader.running.worker.hint_check import actual_runs, broken_group, undivisible


def test_actual_runs() -> None:
    assert actual_runs(np.arange(16), 0) == 16  # contiguous throughout
    assert actual_runs(np.array([0, 1, 2, 3, 8, 9, 10, 11]), 0) == 4
    assert actual_runs(np.array([5, 5, 5, 5, 6, 6, 6, 6]), 0, step=0) == 4  # constancy
    assert actual_runs(np.array([[0, 1], [5, 6]]), 1) == 2 and actual_runs(np.array([[0, 1], [5, 6]]), 0) == 1


def test_broken_group_and_undivisible() -> None:
    data = np.array([0, 1, 2, 3, 4, 5, 7, 8])
    assert broken_group(data, 0, 4, 1) == {"dim": 0, "index": [4], "group": 4, "values": [4, 5, 7, 8]}
    assert broken_group(np.arange(8), 0, 4, 1) is None
    starts = np.array([16, 17, 18, 19, 20, 21, 22, 23])
    assert undivisible(starts, 0, 4, 16)["index"] == [4] and undivisible(starts, 0, 4, 16)["value"] == 20
    assert undivisible(np.arange(0, 64, 1), 0, 16, 16) is None
