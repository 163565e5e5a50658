"""grader/running/cases/probes.py: the second runs a first run asks for, with the run itself faked: a wrong output
that changes between identical runs is nondeterministic, NaN that turns finite with finite guards was read from
the guards, and neither probe runs again when the first run passed or raised."""

from __future__ import annotations

import math

import torch

from grader import trap_ids
from grader.authoring.spec import Tolerance
from grader.evidence.observation import Observation
from grader.running.cases.probes import (
    GUARD_PROBE_VALUE,
    OUT_OF_MEMORY_WAIT_S,
    TimeoutsAlone,
    probe_guard_reads,
    probe_nondeterminism,
    retry_out_of_memory,
    runs_again_for_memory,
)

TOL = Tolerance(atol=1e-6, rtol=1e-6, why="exact arithmetic in these fakes")
EXPECTED = {"out": torch.ones(4, dtype=torch.float64)}


class Runs:
    """A fake `run_again`: the observations it returns, in order, and the guard values it was asked for."""

    def __init__(self, *outputs: torch.Tensor) -> None:
        self.outputs = list(outputs)
        self.asked: list[float | None] = []

    def __call__(self, finite_guard: float | None) -> Observation:
        self.asked.append(finite_guard)
        return Observation(outputs={"out": self.outputs.pop(0)})


def test_a_wrong_output_that_changes_between_runs_is_nondeterministic() -> None:
    first = Observation(outputs={"out": torch.tensor([1.0, 2.0, 1.0, 1.0])})
    runs = Runs(torch.tensor([1.0, 3.0, 1.0, 1.0]))
    assert probe_nondeterminism(runs, EXPECTED, TOL, first).nondeterministic == ("out",)
    assert runs.asked == [None]  # the identical case, guards as before
    same = Runs(torch.tensor([1.0, 2.0, 1.0, 1.0]))
    assert probe_nondeterminism(same, EXPECTED, TOL, first).nondeterministic == ()


def test_a_right_or_raising_first_run_is_not_run_again() -> None:
    runs = Runs()
    right = Observation(outputs={"out": torch.ones(4)})
    assert probe_nondeterminism(runs, EXPECTED, TOL, right) is right
    failed = Observation(trap=trap_ids.RUNTIME_ERROR, message="raised")
    assert probe_nondeterminism(runs, EXPECTED, TOL, failed) is failed
    assert probe_guard_reads(runs, EXPECTED, failed) is failed
    assert runs.asked == []


def test_nan_that_turns_finite_with_finite_guards_was_read_from_them() -> None:
    first = Observation(outputs={"out": torch.tensor([1.0, math.nan, 1.0, math.nan])},
                        unwritten={"out": torch.zeros(4, dtype=torch.bool)})
    runs = Runs(torch.tensor([1.0, GUARD_PROBE_VALUE, 1.0, math.nan]))  # index 3: NaN from the arithmetic
    probed = probe_guard_reads(runs, EXPECTED, first)
    assert runs.asked == [GUARD_PROBE_VALUE]
    assert probed.guard_reads["out"].tolist() == [False, True, False, False]


def test_a_case_that_ran_out_of_gpu_memory_runs_once_more_and_that_run_is_the_case() -> None:
    """A neighbour's hog filled the GPU as this case ran: after a wait the case runs again and its second run is
    the verdict; a submission over its own budget (the watchdog's words) is not run again."""
    waits: list[float] = []
    neighbour = Observation(trap=trap_ids.OUT_OF_MEMORY, message="raised OutOfMemoryError: CUDA out of memory. "
                            "Tried to allocate 2.00 MiB. GPU 0 has 1.2 MiB free")
    passed = Observation(outputs={"out": torch.ones(2)})
    assert retry_out_of_memory(lambda guard: passed, neighbour, waits.append) is passed
    assert waits == [OUT_OF_MEMORY_WAIT_S] and runs_again_for_memory(neighbour)
    greedy = Observation(trap=trap_ids.OUT_OF_MEMORY, message="the worker used 12.4 GiB of GPU memory, over its "
                         "budget of 8 GiB: stopped")
    assert not runs_again_for_memory(greedy)
    assert retry_out_of_memory(lambda guard: passed, greedy, waits.append) is greedy and len(waits) == 1
    crashed = Observation(trap=trap_ids.CRASH, message="the worker died")
    assert retry_out_of_memory(lambda guard: passed, crashed, waits.append) is crashed and len(waits) == 1


def test_a_case_that_timed_out_on_a_gpu_runs_once_more_alone_and_a_spinning_kernel_only_once() -> None:
    """Beside a class's grades a correct kernel can wait for the GPU past its window (the H100's batch of 16: three
    correct cases lost): it runs again with the GPU alone and that run is the case's. A kernel that spins alone too
    keeps its timeout, and its target's later timeouts are final with no run alone each."""
    timed_out = Observation(trap=trap_ids.TIMEOUT, message="Did not finish: nothing happened for 5 s")
    passed = Observation(outputs={"out": torch.ones(2)})
    runs: list[str] = []

    def alone(result: Observation):
        return lambda: runs.append("alone") or result

    gpu = TimeoutsAlone(on_gpu=True)
    assert gpu.settle("softmax", timed_out, alone(passed)) is passed and runs == ["alone"]
    assert gpu.settle("softmax", timed_out, alone(passed)) is passed and len(runs) == 2  # not spinning: again alone
    assert gpu.settle("kernel", timed_out, alone(timed_out)) is timed_out and len(runs) == 3
    assert gpu.settle("kernel", timed_out, alone(passed)) is timed_out and len(runs) == 3  # spun alone: final
    for other in (passed, Observation(trap=trap_ids.CRASH, message="died"),
                  Observation(trap=trap_ids.TIMEOUT, message="import", at_import=True)):
        assert gpu.settle("softmax", other, alone(passed)) is other and len(runs) == 3
    assert TimeoutsAlone(on_gpu=False).settle("softmax", timed_out, alone(passed)) is timed_out and len(runs) == 3
