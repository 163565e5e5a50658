"""grader/running/cases/observe.py: a worker's reply as what the case observed: storages compared with what was
sent (a store into a guard band, an output element never written), a wrapper's return value mapped onto the
spec's outputs, a malformed reply a crash, the worker's error named; and when a case gets a fresh worker."""

from __future__ import annotations

import torch

from grader import trap_ids
from grader.authoring.inputs import InputMaker
from grader.authoring.oracle_loader import load_problems
from grader.authoring.spec import load_assignment
from grader.backends import Backend
from grader.evidence import guard_bits
from grader.evidence.guard_bits import GuardFinding
from grader.evidence.observation import Observation
from grader.evidence.worker_error import WorkerError
from grader.running import guards, protocol
from grader.running.cases.observe import launched, needs_fresh_worker, raised, unpack_returns
from grader.running.cases.requests import launch_request
from tests.conftest import ROOT

SOFTMAX = load_assignment(ROOT / "assignments" / "softmax" / "assignment.toml")


def test_unpack_returns() -> None:
    tensor = torch.zeros(2)
    assert unpack_returns({"tensor": tensor, "device": "cpu"}, ("out",), Backend.INTERPRETER) == ({"out": tensor}, "")
    _, problem = unpack_returns({"tensor": tensor, "device": "cpu"}, ("out",), Backend.CUDA)
    assert "must stay on the input's device (cuda)" in problem
    _, problem = unpack_returns({"type": "tuple", "sequence": [{}]}, ("mean", "rstd"), Backend.INTERPRETER)
    assert problem.startswith("a tuple of 1, but it must return 2 tensors (mean, rstd)")


def test_needs_fresh_worker() -> None:
    assert not needs_fresh_worker(Observation())
    assert needs_fresh_worker(Observation(trap=trap_ids.TIMEOUT))
    assert needs_fresh_worker(Observation(guard_findings=(GuardFinding("oob-write", "out", 1, "out[9]"),)))
    assert not needs_fresh_worker(Observation(guard_findings=(GuardFinding("unwritten-output", "out", 1, "out[0]"),)))


def placed_kernel_case():
    case = SOFTMAX.case("kernel-basic")
    spec = SOFTMAX.kernels[case.target]
    problem = load_problems(SOFTMAX)[spec.problem]
    inputs = problem.make_inputs(case, InputMaker(3))
    placed, request, _ = launch_request(spec, case, problem, inputs, count_traffic=False)
    return case, placed, request


def test_storages_sent_back_untouched_show_every_output_element_unwritten() -> None:
    case, placed, request = placed_kernel_case()
    reply = protocol.Launched(ok=True, storages=tuple(s.clone() for s in request.storages))
    observed = launched(placed, reply, case, "")
    assert observed.trap is None and set(observed.outputs) == {"out"}
    assert bool(observed.unwritten["out"].all())  # the poison is still there: nothing was stored
    (finding,) = observed.guard_findings
    assert (finding.trap, finding.count) == (trap_ids.UNWRITTEN_OUTPUT, observed.outputs["out"].numel())


def test_a_store_into_a_guard_band_is_an_out_of_bounds_write() -> None:
    case, placed, request = placed_kernel_case()
    storages = [s.clone() for s in request.storages]
    (key,) = [k for k in placed.keys if placed.plans[k].role == "output"]
    index = placed.keys.index(key)
    plan = placed.plans[key]
    guard_bits.bits(storages[index])[plan.guard - 1] = 0  # one element before the output's first
    observed = launched(placed, protocol.Launched(ok=True, storages=tuple(storages)), case, "")
    assert [f.trap for f in observed.guard_findings] == [trap_ids.OOB_WRITE, trap_ids.UNWRITTEN_OUTPUT]


def test_a_reply_that_does_not_match_what_was_sent_is_a_crash() -> None:
    case, placed, request = placed_kernel_case()
    short = launched(placed, protocol.Launched(ok=True, storages=request.storages[:1]), case, "")
    assert short.trap == trap_ids.CRASH and "malformed reply" in short.message
    reshaped = tuple(s.reshape(-1)[:-1].clone() for s in request.storages)
    assert launched(placed, protocol.Launched(ok=True, storages=reshaped), case, "").trap == trap_ids.CRASH


def test_an_error_the_student_raised_is_named_with_its_line() -> None:
    error = WorkerError(type="ValueError", message="bad block", frames=())
    observed = raised(protocol.failed(protocol.Launched, error), "softmax_kernel[grid]()", "softmax.py", (), "tail")
    assert observed.trap == trap_ids.RUNTIME_ERROR and observed.message == ("softmax_kernel[grid]() raised "
                                                                          "ValueError: bad block")
    assert observed.output_tail == "tail"


def test_guards_are_where_the_placement_says() -> None:
    _, placed, _ = placed_kernel_case()
    assert all(plan.guard >= guards.GUARD_MIN for plan in placed.plans.values())
