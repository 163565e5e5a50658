"""grader/running/timing/failures.py: a case that failed at the timed size is named for what happened, and only an
allocation that failed (never a worker over its own budget) reads as the GPU running out of memory."""

from __future__ import annotations

from grader import trap_ids
from grader.authoring.spec import PerformanceCase
from grader.running.timing.failures import failed, out_of_memory

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
        result = failed(PERF, detail)
        assert (result.status, result.trap, result.reason) == ("error", trap, detail), detail


def test_out_of_memory_is_an_allocation_that_failed_not_a_budget_kept() -> None:
    assert out_of_memory("torch eager could not be timed at 8192x8192: AcceleratorError: CUDA error: out of "
                         "memory\nSearch for `cudaErrorMemoryAllocation'") \
        == "torch eager could not be timed at 8192x8192: AcceleratorError: CUDA error: out of memory"
    assert out_of_memory("running layernorm raised OutOfMemoryError: CUDA out of memory. Tried to allocate 512 MiB")
    assert out_of_memory("out-of-memory: the worker used 12.4 GiB of GPU memory, over its budget of 8 GiB: "
                         "stopped") == ""  # the submission's own, and final
    assert out_of_memory("timeout: did not finish within 90 s") == ""
