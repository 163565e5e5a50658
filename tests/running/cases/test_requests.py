"""grader/running/cases/requests.py: a case as its worker's request: every buffer in a guarded storage of its
own, the kernel's arguments naming them by view, the contract's grid and the case's constexprs; a wrapper's
call likewise; traffic counted only where asked (the interpreter)."""

from __future__ import annotations

import torch

from grader.authoring.inputs import InputMaker
from grader.authoring.oracle_loader import load_problems
from grader.authoring.spec import load_assignment
from grader.running import protocol
from grader.running.cases.requests import call_request, launch_request
from tests.conftest import ROOT

SOFTMAX = load_assignment(ROOT / "assignments" / "softmax" / "assignment.toml")
PROBLEM = load_problems(SOFTMAX)["softmax"]


def test_a_kernel_case_is_a_launch_on_guarded_storages() -> None:
    case = SOFTMAX.case("kernel-basic")
    spec = SOFTMAX.kernels[case.target]
    inputs = PROBLEM.make_inputs(case, InputMaker(3))
    placed, request, what = launch_request(spec, case, PROBLEM, inputs, count_traffic=True)
    assert isinstance(request, protocol.Launch) and request.kernel == spec.name and request.count_traffic
    assert request.grid == tuple(spec.grid) and dict(request.meta) == dict(case.meta)
    assert what.startswith(f"{spec.name}[grid](")
    assert len(request.storages) == len(request.views) == len(placed.keys)
    x_view = next(v for v, key in zip(request.views, placed.keys, strict=True) if placed.plans[key].name == "x")
    x = torch.as_strided(request.storages[x_view["storage"]], x_view["shape"], x_view["stride"], x_view["offset"])
    assert torch.equal(x, inputs["x"])  # the input, inside its guard bands
    assert request.storages[x_view["storage"]].numel() > inputs["x"].numel()
    assert sum(isinstance(a, dict) and "view" in a for a in request.args) == len(placed.keys)


def test_a_wrapper_case_is_a_call() -> None:
    case = SOFTMAX.case("softmax-basic")
    inputs = PROBLEM.make_inputs(case, InputMaker(3))
    placed, request, what = call_request(SOFTMAX.functions["softmax"], case, PROBLEM, inputs, count_traffic=False)
    assert isinstance(request, protocol.Call) and request.function == "softmax" and not request.count_traffic
    assert what == "softmax(...)" and request.args[0] == {"view": 0} and len(placed.keys) == 1
    assert protocol.decode_request(protocol.encode(request)).function == "softmax"
