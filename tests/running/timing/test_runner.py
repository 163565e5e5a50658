"""grader/running/timing/runner.py without a GPU: a case that failed at the timed size is named for what
happened. (The runner at work on a fake clock: tests/judging/test_performance.py; on a GPU:
tests/e2e/test_gpu_performance.py.)"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from grader import trap_ids
from grader.authoring.spec import PerformanceCase
from grader.judging.performance import errored
from grader.results import PerformanceResult
from grader.running.timing import runner as runner_module
from grader.running.timing.runner import MEMORY_RETRY_WAITS_S, PerformanceRunner, _failed, out_of_memory

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


def test_out_of_memory_is_an_allocation_that_failed_not_a_budget_kept() -> None:
    assert out_of_memory("torch eager could not be timed at 8192x8192: AcceleratorError: CUDA error: out of "
                         "memory\nSearch for `cudaErrorMemoryAllocation'") \
        == "torch eager could not be timed at 8192x8192: AcceleratorError: CUDA error: out of memory"
    assert out_of_memory("running layernorm raised OutOfMemoryError: CUDA out of memory. Tried to allocate 512 MiB")
    assert out_of_memory("out-of-memory: the worker used 12.4 GiB of GPU memory, over its budget of 8 GiB: "
                         "stopped") == ""  # the submission's own, and final
    assert out_of_memory("timeout: did not finish within 90 s") == ""


class _Memoryless(PerformanceRunner):
    """A runner whose `_measure` plays a script: a result, or an exception to raise."""

    def __init__(self, script: list[PerformanceResult | Exception]) -> None:  # noqa: D107 - no workers, no GPU
        self.script = script
        self.tries = 0

    def _measure(self, prepared: Any, battery: Any) -> PerformanceResult:
        self.tries += 1
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


def test_a_case_short_of_gpu_memory_is_timed_again_and_never_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """A neighbour held the memory (a hog before the watchdog stopped it): the case is timed again after a wait;
    a case still short after every try says the machine's problem, not the student's."""
    slept: list[float] = []
    monkeypatch.setattr(runner_module.time, "sleep", slept.append)
    prepared = SimpleNamespace(perf=PERF)
    timed = dataclasses.replace(errored(PERF, ""), status="timed", reason="")
    short = errored(PERF, "torch eager could not be timed at 4096x4096: CUDA error: out of memory")
    runner = _Memoryless([short, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 512 MiB"), timed])
    assert runner._measure_again_for_memory(prepared, None) is timed  # type: ignore[arg-type]
    assert runner.tries == 3 and slept == list(MEMORY_RETRY_WAITS_S)
    slept.clear()
    runner = _Memoryless([torch.OutOfMemoryError("CUDA out of memory")] * (len(MEMORY_RETRY_WAITS_S) + 1))
    result = runner._measure_again_for_memory(prepared, None)  # type: ignore[arg-type]
    assert result.status == "error" and "a problem of the machine, not your code" in result.reason
    assert "CUDA out of memory" in result.reason and f"{len(MEMORY_RETRY_WAITS_S) + 1} times" in result.reason
    over_budget = errored(PERF, "out-of-memory: the worker used 9 GiB of GPU memory, over its budget of 8 GiB")
    runner = _Memoryless([over_budget])
    assert runner._measure_again_for_memory(prepared, None) is over_budget and runner.tries == 1  # type: ignore[arg-type]
    runner = _Memoryless([ValueError("a grader bug")])
    with pytest.raises(ValueError):
        runner._measure_again_for_memory(prepared, None)  # type: ignore[arg-type]
