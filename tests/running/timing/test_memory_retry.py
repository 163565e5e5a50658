"""grader/running/timing/memory_retry.py: a step of a grade's timing run again while the GPU's memory ran out under it
(the runner's three steps at the timed size on a scripted runner: tests/running/timing/test_runner.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from grader import trap_ids
from grader.authoring.spec import PerformanceCase
from grader.judging.performance import errored
from grader.running.timing import memory_retry
from grader.running.timing.memory_retry import MEMORY_RETRY_WAITS_S, again_while_short_of_memory, short_of_memory

PERF = PerformanceCase(id="p", target="layernorm", dims={"M": 4096, "N": 4096}, tolerance="rowwise")
NEIGHBOUR = errored(PERF, "out-of-memory: running layernorm at 4096x4096 raised OutOfMemoryError: CUDA out of memory. "
                          "Tried to allocate 64.00 MiB", trap=trap_ids.OUT_OF_MEMORY)
OWN_BUDGET = errored(PERF, "out-of-memory: the worker used 9 GiB of GPU memory, over its budget of 8 GiB",
                     trap=trap_ids.OUT_OF_MEMORY)


def test_only_an_untimed_result_short_of_memory_within_budget_is_short() -> None:
    assert short_of_memory(NEIGHBOUR).startswith("out-of-memory: running layernorm") and "CUDA out of memory" in \
        short_of_memory(NEIGHBOUR)
    assert short_of_memory(OWN_BUDGET) == ""  # the submission's own doing: final
    assert short_of_memory(dataclasses.replace(NEIGHBOUR, status="timed")) == ""
    assert short_of_memory(errored(PERF, "crash: the worker died")) == ""
    assert short_of_memory(None) == "" and short_of_memory(object()) == ""  # a step that went on


def test_a_step_runs_again_after_each_wait_and_the_last_try_is_the_cases(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(memory_retry.time, "sleep", slept.append)
    script: list[object] = [NEIGHBOUR, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"), "went on"]
    def step() -> object:
        next_ = script.pop(0)
        if isinstance(next_, Exception):
            raise next_  # the grader's own allocation, short
        return next_

    assert again_while_short_of_memory(PERF, "checking", step) == "went on"
    assert slept == list(MEMORY_RETRY_WAITS_S) and script == []
    slept.clear()
    assert again_while_short_of_memory(PERF, "checking", lambda: OWN_BUDGET) is OWN_BUDGET and slept == []
    assert again_while_short_of_memory(PERF, "recording", lambda: NEIGHBOUR) is NEIGHBOUR
    assert slept == list(MEMORY_RETRY_WAITS_S)  # still short: the last try's result


def test_the_graders_own_allocation_still_short_is_the_machines_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_retry.time, "sleep", lambda seconds: None)
    tries = []

    def short() -> None:
        tries.append(1)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    result = again_while_short_of_memory(PERF, "timing", short)
    assert len(tries) == len(MEMORY_RETRY_WAITS_S) + 1 and result.status == "error"
    assert result.reason == ("the GPU ran out of memory while the grader was timing this case (CUDA out of memory. "
                             "Tried to allocate 2.00 GiB), 3 times: a problem of the machine, not your code")

    def broken() -> None:
        raise ValueError("a grader bug")

    with pytest.raises(ValueError):  # not a shortage of memory: the caller's to word
        again_while_short_of_memory(PERF, "timing", broken)
    with pytest.raises(RuntimeError, match="device-side assert"):
        again_while_short_of_memory(PERF, "timing", lambda: (_ for _ in ()).throw(RuntimeError("device-side assert")))
