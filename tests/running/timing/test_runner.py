"""grader/running/timing/runner.py without a GPU: a case that failed at the timed size is named for what
happened. (The runner at work on a fake clock: tests/judging/test_performance.py; on a GPU:
tests/e2e/test_gpu_performance.py.)"""

from __future__ import annotations

from grader import trap_ids
from grader.authoring.spec import PerformanceCase
from grader.running.timing.runner import _failed

PERF = PerformanceCase(id="p", target="layernorm", dims={"M": 4096, "N": 4096}, tolerance="rowwise")


def test_a_failure_at_the_timed_size_is_named_for_what_happened() -> None:
    for detail, trap in (
        ("timeout: timing layernorm: did not finish within 90 s", trap_ids.TIMEOUT),
        ("running layernorm at 4096x4096 raised RuntimeError: did not finish", trap_ids.TIMEOUT),
        ("out-of-memory: the worker used 80 GiB", trap_ids.OUT_OF_MEMORY),
        ("running layernorm raised OutOfMemoryError: CUDA out of memory", trap_ids.OUT_OF_MEMORY),
        ("crash: the worker died (signal SIGSEGV)", trap_ids.CRASH),
        ("running layernorm raised ValueError: bad shape", trap_ids.RUNTIME_ERROR),
    ):
        result = _failed(PERF, detail)
        assert (result.status, result.trap, result.reason) == ("error", trap, detail), detail
