"""Pure words for a performance case that failed at the timed size: named for what happened (`failed`), and the line
that says the GPU ran out of memory (`out_of_memory`), which the runner runs again (memory_retry)."""

from __future__ import annotations

from grader.authoring.spec import PerformanceCase
from grader.judging.performance import errored
from grader.results import DeviceInfo, PerformanceResult
from grader.running.processes.gpu_memory import names_own_budget
from grader.trap_ids import CRASH, OUT_OF_MEMORY, RUNTIME_ERROR, TIMED_OUTPUT_CHANGED, TIMEOUT


def out_of_memory(reason: str) -> str:
    """Pure: the line of `reason` that says the GPU ran out of memory, at most 160 characters ('' if none): an
    allocation that failed, not a worker stopped for going over its own budget (that is the submission's, and
    final)."""
    if names_own_budget(reason):
        return ""
    line = next((line for line in reason.splitlines() if "out of memory" in line.lower()), "")
    return line.strip()[:160]


def failed(perf: PerformanceCase, detail: str, device: DeviceInfo | None = None) -> PerformanceResult:
    """A case that failed at the timed size, named for what happened (timeout, out of memory, a crash)."""
    lowered = detail.lower()
    if detail.startswith(TIMED_OUTPUT_CHANGED):
        return errored(perf, detail.removeprefix(TIMED_OUTPUT_CHANGED + ": "), device, trap=TIMED_OUTPUT_CHANGED)
    if detail.startswith("timeout") or "did not finish" in lowered:
        return errored(perf, detail, device, trap=TIMEOUT)
    if detail.startswith(OUT_OF_MEMORY) or "out of memory" in lowered or "outofmemoryerror" in lowered:
        return errored(perf, detail, device, trap=OUT_OF_MEMORY)
    if detail.startswith("crash"):
        return errored(perf, detail, device, trap=CRASH)
    return errored(perf, detail, device, trap=RUNTIME_ERROR)
