"""grader/running/timing/runner.py without a GPU: a case that failed at the timed size is named for what
happened. (The runner at work on a fake clock: tests/judging/test_performance.py; on a GPU:
tests/e2e/test_gpu_performance.py.)"""

from __future__ import annotations

import contextlib
import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from grader import trap_ids
from grader.authoring.spec import PerformanceCase
from grader.judging.performance import errored
from grader.results import PerformanceResult
from grader.running.timing import memory_retry
from grader.running.timing.memory_retry import MEMORY_RETRY_WAITS_S
from grader.running.timing.runner import PerformanceRunner

PERF = PerformanceCase(id="p", target="layernorm", dims={"M": 4096, "N": 4096}, tolerance="rowwise")


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
    monkeypatch.setattr(memory_retry.time, "sleep", slept.append)
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


class _Recorder(PerformanceRunner):
    """A runner whose `_record` plays a script, on a battery whose GPU slot is recorded."""

    def __init__(self, device: str, script: list[Any]) -> None:  # noqa: D107 - no workers, no GPU
        self.device = device
        self.script = script
        self.alone: list[bool] = []
        self.holding = False

    def _record(self, perf: PerformanceCase, battery: Any) -> Any:
        self.alone.append(self.holding)
        return self.script.pop(0)


def _battery_noting_the_slot(runner: Any) -> SimpleNamespace:
    """A battery whose GPU slot, taken alone, sets `runner.holding` while held (no clock, no GPU)."""
    import contextlib

    @contextlib.contextmanager
    def alone():  # type: ignore[no-untyped-def]
        runner.holding = True
        yield
        runner.holding = False
    return SimpleNamespace(clock=SimpleNamespace(phase=lambda name: contextlib.nullcontext()),
                           workers=SimpleNamespace(alone_on_gpu=alone, shared_gpu=contextlib.nullcontext))


def test_a_recording_that_timed_out_on_a_gpu_is_made_again_with_the_gpu_alone() -> None:
    """A class's busy GPU cost correct files a case at the timed size as at the small ones: the recording runs once
    more with the GPU's exclusive slot, and that is the case's; any other failure, or the CPU, is final at once."""

    timeout = errored(PERF, "timeout: running layernorm at 4096x4096: nothing happened for 5 s", trap=trap_ids.TIMEOUT)
    prepared = object()

    def battery_of(runner: _Recorder) -> SimpleNamespace:
        return _battery_noting_the_slot(runner)

    gpu = _Recorder("cuda", [timeout, prepared])
    assert gpu._record_fairly(PERF, battery_of(gpu)) is prepared and gpu.alone == [False, True]  # type: ignore[arg-type]
    spins = _Recorder("cuda", [timeout, timeout])
    assert spins._record_fairly(PERF, battery_of(spins)) is timeout and spins.alone == [False, True]  # type: ignore[arg-type]
    crash = errored(PERF, "crash: the worker died", trap=trap_ids.CRASH)
    once = _Recorder("cuda", [crash])
    assert once._record_fairly(PERF, battery_of(once)) is crash and once.alone == [False]  # type: ignore[arg-type]
    cpu = _Recorder("cpu", [timeout])
    assert cpu._record_fairly(PERF, battery_of(cpu)) is timeout and cpu.alone == [False]  # type: ignore[arg-type]


def test_a_recording_or_a_check_short_of_gpu_memory_runs_again_and_the_case_is_not_lost(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The timed size's recording (the student's worker) and the timer's check there share the GPU with a class's
    other grades: where one ran out of memory a neighbour held, it runs again after each wait (memory_retry), and the
    case goes on; a worker over its own budget, or a kernel whose outputs are wrong, is final at once."""
    slept: list[float] = []
    monkeypatch.setattr(memory_retry.time, "sleep", slept.append)
    neighbour = errored(PERF, "out-of-memory: running layernorm at 4096x4096 raised OutOfMemoryError: CUDA out of "
                              "memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of 79.19 GiB of which "
                              "705.00 MiB is free", trap=trap_ids.OUT_OF_MEMORY)
    prepared = object()
    recorder = _Recorder("cuda", [neighbour, neighbour, prepared])
    assert recorder._record_fairly(PERF, None) is prepared and slept == list(MEMORY_RETRY_WAITS_S)  # type: ignore[arg-type]
    slept.clear()
    own = errored(PERF, "out-of-memory: the worker used 9 GiB of GPU memory, over its budget of 8 GiB",
                  trap=trap_ids.OUT_OF_MEMORY)
    recorder = _Recorder("cuda", [own])
    assert recorder._record_fairly(PERF, None) is own and slept == []  # type: ignore[arg-type]
    recorder = _Recorder("cuda", [neighbour] * 3)  # still short after every wait: the last try's words are the case's
    assert recorder._record_fairly(PERF, None) is neighbour and len(slept) == 2  # type: ignore[arg-type]

    slept.clear()
    checks: list[Any] = [neighbour, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"), None]
    kept: list[str] = []
    sharing: list[bool] = []  # whether this grade held the GPU shared: a pause must not (others' timing waits for it)
    holding = [False]

    def pause(seconds: float) -> None:
        slept.append(seconds)
        sharing.append(holding[0])

    monkeypatch.setattr(memory_retry.time, "sleep", pause)

    @contextlib.contextmanager
    def shared():  # type: ignore[no-untyped-def]
        holding[0] = True
        yield
        holding[0] = False

    battery = SimpleNamespace(clock=SimpleNamespace(phase=lambda name: contextlib.nullcontext()),
                              workers=SimpleNamespace(shared_gpu=shared))

    class _Checker(PerformanceRunner):
        def __init__(self) -> None:  # noqa: D107 - no workers, no GPU
            self.device = "cuda"
            self.contestants = SimpleNamespace(  # type: ignore[assignment]  # no reference worker up yet
                keep_reference=lambda p: kept.append(p.perf.id), drop_timer=lambda: None, lose_reference=lambda: None,
                reference=None)

        def _check(self, prepared: Any, battery: Any) -> PerformanceResult | None:
            step = checks.pop(0)
            if isinstance(step, Exception):
                raise step  # the grader's own torch eager at the timed size, short of memory
            return step  # type: ignore[no-any-return]

    case = SimpleNamespace(perf=PERF)
    assert _Checker()._check_fairly(case, battery) is None  # type: ignore[arg-type]
    assert checks == [] and kept == [PERF.id] and slept == list(MEMORY_RETRY_WAITS_S)
    assert sharing == [False, False]
    wrong = errored(PERF, "at 4096x4096 the output of your kernel launches differs from F.layer_norm")
    checks.append(wrong)
    assert _Checker()._check_fairly(case, battery) is wrong and kept == [PERF.id]  # type: ignore[arg-type]


def test_a_check_that_timed_out_on_a_gpu_runs_again_with_the_gpu_alone() -> None:
    """As the recording: the timer's check at the timed size that timed out beside a class's other grades runs once
    more with the GPU to this grade alone, and that is the case's; another failure, or the CPU, is final at once."""

    timeout = errored(PERF, "timeout: running layernorm's launches at 4096x4096: did not finish", trap=trap_ids.TIMEOUT)

    class _Checked(PerformanceRunner):
        def __init__(self, device: str, script: list[Any]) -> None:  # noqa: D107 - no workers, no GPU
            self.device, self.script, self.alone, self.holding = device, script, [], False

        def _case_alone(self, prepared: Any, doing: str, run: Any) -> PerformanceResult | None:
            self.alone.append(self.holding)
            return self.script.pop(0)  # type: ignore[no-any-return]

    def battery_of(runner: _Checked) -> SimpleNamespace:
        return _battery_noting_the_slot(runner)

    gpu = _Checked("cuda", [timeout, None])
    assert gpu._check_fairly(SimpleNamespace(perf=PERF), battery_of(gpu)) is None and gpu.alone == [False, True]  # type: ignore[arg-type]
    spins = _Checked("cuda", [timeout, timeout])
    assert spins._check_fairly(SimpleNamespace(perf=PERF), battery_of(spins)) is timeout  # type: ignore[arg-type]
    wrong = errored(PERF, "at 4096x4096 the output of your kernel launches differs from F.layer_norm")
    once = _Checked("cuda", [wrong])
    assert once._check_fairly(SimpleNamespace(perf=PERF), battery_of(once)) is wrong and once.alone == [False]  # type: ignore[arg-type]
    cpu = _Checked("cpu", [timeout])
    assert cpu._check_fairly(SimpleNamespace(perf=PERF), battery_of(cpu)) is timeout and cpu.alone == [False]  # type: ignore[arg-type]


class _Seated(PerformanceRunner):
    """A runner whose checks and timed samples play a script, to see when its profiler's workers start."""

    def __init__(self, events: list[str]) -> None:  # noqa: D107 - no workers, no GPU
        self.device = "cpu"  # no GPU slot to take
        self.profile_every_case = True
        self.events = events
        self.profiles: dict[str, Any] = {}
        self.contestants = SimpleNamespace(clocks_already_up=lambda: None)

    def _case_alone(self, prepared: Any, doing: str, run: Any) -> PerformanceResult | None:
        self.events.append(doing)
        return None if doing == "checking" else dataclasses.replace(errored(PERF, ""), status="timed", reason="")


def test_the_profilers_workers_start_only_with_the_timing_seat_held() -> None:
    """A process under Nsight Compute keeps a core busy while it lives: started while the student's worker recorded,
    every grade of a class waiting for a timing seat had two (an H100's 16 cores: ncu took 453 of 773 CPU-seconds).
    They start in `_check_and_measure`, which runs with the seat held, before the checks they overlap."""
    import contextlib

    events: list[str] = []

    class Profiler:
        def spawn(self, ids: list[str]) -> None:
            events.append(f"spawn {ids}")

        def prepare_student(self, cases: Any) -> None:
            events.append("prepare student")

        def prepare_reference(self, cases: Any) -> None:
            events.append("prepare reference")

        def measure(self, ids: Any) -> None:
            events.append("profile")

        def finish(self, cases: Any) -> dict[str, Any]:
            return {}

        def close(self) -> None:
            events.append("close")

    battery = SimpleNamespace(clock=SimpleNamespace(phase=lambda name: contextlib.nullcontext()),
                              workers=SimpleNamespace(shared_gpu=contextlib.nullcontext))
    results: dict[str, PerformanceResult] = {}
    _Seated(events)._check_and_measure([SimpleNamespace(perf=PERF)], battery, Profiler(), results)  # type: ignore[arg-type]
    assert events[0] == "spawn ['p']" and events.index("spawn ['p']") < events.index("checking")
    assert events[-3:] == ["timing", "profile", "close"] and results["p"].status == "timed"


def test_the_reference_keeps_its_launches_beside_the_timers_check_where_its_worker_is_up() -> None:
    """With the reference's worker up, its launches are kept on a thread while the timer checks the student's (both
    wait on other processes): the check's time is the longer of the two, not their sum; a check that fails still
    waits for the keep (nothing of the grade's runs on after it); without a worker up the keep follows a passing
    check on the grade's own thread (it may start the worker, which dies with the thread that started it)."""
    import threading
    import time

    events: list[tuple[str, str, float]] = []
    grade_thread = threading.get_ident()

    def keep(prepared: Any) -> None:
        where = "grade" if threading.get_ident() == grade_thread else "beside"
        events.append(("keep start", where, time.monotonic()))
        time.sleep(0.3)
        events.append(("keep end", where, time.monotonic()))

    class _Checker(PerformanceRunner):
        def __init__(self, reference: object, verdict: PerformanceResult | None) -> None:  # noqa: D107
            self.device = "cuda"
            self.verdict = verdict
            self.contestants = SimpleNamespace(keep_reference=keep, reference=reference)  # type: ignore[assignment]

        def _check(self, prepared: Any, battery: Any) -> PerformanceResult | None:
            events.append(("check start", "grade", time.monotonic()))
            time.sleep(0.3)
            events.append(("check end", "grade", time.monotonic()))
            return self.verdict

    case = SimpleNamespace(perf=PERF)
    started = time.monotonic()
    assert _Checker(object(), None)._check_and_keep(case, None) is None  # type: ignore[arg-type]
    assert time.monotonic() - started < 0.55  # side by side: about 0.3 s, not 0.6
    assert {(name, where) for name, where, _ in events} == {
        ("keep start", "beside"), ("keep end", "beside"), ("check start", "grade"), ("check end", "grade")}
    events.clear()
    wrong = errored(PERF, "at 4096x4096 the output of your kernel launches differs from F.layer_norm")
    assert _Checker(object(), wrong)._check_and_keep(case, None) is wrong  # type: ignore[arg-type]
    assert [name for name, _, _ in events].count("keep end") == 1  # waited for, though never timed
    events.clear()
    assert _Checker(None, None)._check_and_keep(case, None) is None  # type: ignore[arg-type]
    assert [(name, where) for name, where, _ in events] == [
        ("check start", "grade"), ("check end", "grade"), ("keep start", "grade"), ("keep end", "grade")]
    events.clear()
    assert _Checker(None, wrong)._check_and_keep(case, None) is wrong  # type: ignore[arg-type]
    assert [name for name, _, _ in events] == ["check start", "check end"]  # a failed check keeps nothing
