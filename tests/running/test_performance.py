"""grader/running/performance.py without a GPU: the check of an output at the timed size, torch's outputs
by name, and the deadline of a request at the timed size. (The runner at work:
tests/running/worker/test_performance_run.py here, tests/e2e/test_gpu_performance.py on a GPU.)"""

from __future__ import annotations

import pytest
import torch

from grader.authoring.spec import PerformanceCase
from grader.running.performance import (
    compare_outputs,
)


def test_compare_outputs_says_what_is_wrong() -> None:
    expected = {"out": torch.zeros(4, 4)}
    assert compare_outputs({"out": torch.zeros(4, 4)}, expected, 0.0, 0.0) == ""
    wrong = torch.zeros(4, 4)
    wrong[1, 2] = 0.5
    assert "1 of 16 elements differ" in compare_outputs({"out": wrong}, expected, 1e-3, 0.0)
    assert "shape (4, 3)" in compare_outputs({"out": torch.zeros(4, 3)}, expected, 0.0, 0.0)
    assert "shape None" in compare_outputs({}, expected, 0.0, 0.0)


def test_baseline_outputs_by_name() -> None:

    from grader.authoring.problem import Baseline
    from grader.running.performance import baseline_outputs

    stats = Baseline("torch.var_mean", run=lambda inputs: None, outputs=("var", "mean"))
    var, mean = torch.ones(2), torch.zeros(2)
    assert baseline_outputs(stats, (var, mean)) == {"var": var, "mean": mean}
    with pytest.raises(ValueError, match=r"torch.var_mean returned 1 values for outputs \('var', 'mean'\)"):
        baseline_outputs(stats, var)


def test_timed_deadline() -> None:
    from grader.running.performance import COMPILE_LIMIT_S, RUN_GRACE_S, SLOWDOWN_ALLOWED, timed_deadline

    perf = PerformanceCase(id="p", target="layernorm", dims={"M": 4096, "N": 4096}, tolerance="rowwise", timeout_s=90)
    unknown = timed_deadline(perf, None)
    assert (unknown.cap_s, unknown.run_s, unknown.compile_s) == (90, RUN_GRACE_S, COMPILE_LIMIT_S)
    assert timed_deadline(perf, 20.0).run_s == RUN_GRACE_S + SLOWDOWN_ALLOWED * 0.020
