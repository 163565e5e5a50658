"""grader/running/timing/launch_plan.py: a timed run's launches whose every buffer is accounted for (an
input, a fresh buffer, a fill, a copy of an input), else the values came from outside the kernels."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from grader.running.timing.launch_plan import PerformancePlan, plan_performance_run

ROOT = Path(__file__).resolve().parents[3]



def _launch(storages: dict[int, dict], args: list) -> dict:
    return {"complete": True, "why": "", "kernel": "k", "params": ["x_ptr", "out_ptr", "n"], "grid": [4],
            "args": args, "kwargs": {"BLOCK": 64}, "storages": storages}


def _tensor(sid: int, n: int) -> dict:
    return {"tensor": {"sid": sid, "offset": 0, "shape": [n], "stride": [1], "dtype": "float32"}}


def test_plan_accounts_for_inputs_fresh_buffers_fills_and_input_copies() -> None:
    x = torch.arange(8, dtype=torch.float32)
    copy_digest = hashlib.sha256(x.numpy().tobytes()).hexdigest()
    zeros = hashlib.sha256(bytes(32)).hexdigest()
    record = {"launches": [
        _launch({1: {"input": 0, "nbytes": 32}, 2: {"fresh": True, "nbytes": 32}}, [_tensor(1, 8), _tensor(2, 8), 8]),
        _launch({3: {"nbytes": 32, "head": bytes(16), "sha256": zeros},
                 4: {"nbytes": 32, "head": x.numpy().tobytes()[:16], "sha256": copy_digest},
                 2: {"nbytes": 32, "head": b"x" * 16, "sha256": "whatever: written by launch 1"}},
                [_tensor(3, 8), _tensor(4, 8), 8]),
    ], "outputs": [{"sid": 2, "offset": 0, "shape": [8], "stride": [1], "dtype": "float32"}]}
    plan = plan_performance_run(record, [x], "f")
    assert isinstance(plan, PerformancePlan)
    assert plan.buffers == {1: {"input": 0, "nbytes": 32}, 2: {"fresh": True, "nbytes": 32},
                            3: {"fill": bytes(1), "nbytes": 32}, 4: {"copy_of": 0, "nbytes": 32}}
    assert [launch["kwargs"] for launch in plan.launches] == [{"BLOCK": 64}] * 2


def test_a_buffer_from_outside_the_kernels_is_not_timed() -> None:
    """A cache of earlier answers (kept across calls, looked up by input pointer) is no input, no fill."""
    record = {"launches": [_launch({1: {"input": 0, "nbytes": 32},
                                    7: {"nbytes": 32, "head": b"\x01\x02" * 8, "sha256": "0" * 64}},
                                   [_tensor(7, 8), _tensor(1, 8), 8])],
              "outputs": [{"sid": 1}]}
    problem = plan_performance_run(record, [torch.zeros(8)], "layernorm")
    assert isinstance(problem, str)
    assert "`x_ptr`" in problem and "computed outside the kernels" in problem


def test_outputs_must_come_from_the_launches() -> None:
    record = {"launches": [_launch({1: {"input": 0, "nbytes": 32}}, [_tensor(1, 8), _tensor(1, 8), 8])],
              "outputs": [{"sid": 99}]}
    assert "not a buffer any of its kernel launches" in str(plan_performance_run(record, [torch.zeros(8)], "f"))
    assert "launched no Triton kernel" in str(plan_performance_run({"launches": []}, [], "f"))
    incomplete = {"launches": [{"complete": False, "why": "a grid that is not a tuple"}], "outputs": []}
    assert "could not be recorded completely (a grid that is not a tuple)" in str(
        plan_performance_run(incomplete, [], "f"))


# ------------------------------------------------------------------------------------------ end to end




def test_a_plan_rotates_enough_input_sets_to_miss_the_cache() -> None:
    from grader.running.timing.launch_plan import PerformancePlan
    from grader.running.worker.measuring.planned_launches import L2_FLUSH_BYTES, MAX_SETS

    def plan(nbytes: int) -> PerformancePlan:
        return PerformancePlan(buffers={1: {"input": 0, "nbytes": nbytes}}, launches=(), outputs=())

    assert plan(L2_FLUSH_BYTES).input_sets(3) == 2  # one set fills the cache: two, so no sample follows itself
    assert plan(L2_FLUSH_BYTES).input_sets(1) == plan(1).input_sets(1) == 1  # asked for one: back to back
    assert plan(L2_FLUSH_BYTES // 4).input_sets(3) == 4
    assert plan(L2_FLUSH_BYTES // 4 - 1).input_sets(3) == 5  # four would fall a few bytes short
    assert plan(1).input_sets(3) == MAX_SETS


def test_a_plans_timed_bytes_are_one_sets_buffers_its_inputs_and_its_sets() -> None:
    """What the timing seats weigh (gpu_seats.planned_footprint_bytes): every buffer of one set, inputs and fills and
    fresh outputs alike, the inputs' part, and the sets the timer will rotate through."""
    from grader.running.processes.gpu_seats import TimedCaseBytes
    from grader.running.worker.measuring.planned_launches import L2_FLUSH_BYTES

    quarter = L2_FLUSH_BYTES // 4
    plan = PerformancePlan(buffers={1: {"input": 0, "nbytes": quarter // 2}, 2: {"input": 1, "nbytes": 64},
                                    3: {"fresh": True, "nbytes": quarter // 2 - 128}, 4: {"fill": b"\0", "nbytes": 64}},
                           launches=(), outputs=())
    assert plan.timed_bytes(3) == TimedCaseBytes(set_bytes=quarter, input_bytes=quarter // 2 + 64, sets=4)
    assert plan.timed_bytes(1).sets == 1


def test_a_compile_request_carries_every_plans_launches_and_no_tensor() -> None:
    from grader.running.timing.launch_plan import compile_request

    first = PerformancePlan(buffers={}, launches=({"kernel": "a"},), outputs=())
    second = PerformancePlan(buffers={}, launches=({"kernel": "b"}, {"kernel": "a"}), outputs=())
    request = compile_request([first, second])
    assert request.compile_only and [launch["kernel"] for launch in request.launches] == ["a", "b", "a"]
    assert request.inputs == () and request.buffers == {} and not request.return_outputs and not request.time
