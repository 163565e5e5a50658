"""grader.running.cases.arguments: one binding of a target's parameters, encoded for correctness cases (the
battery's guarded views) and for timing (contiguous tensors). Fast: nothing is launched."""

from __future__ import annotations

from pathlib import Path

import torch

from grader.authoring.inputs import InputMaker
from grader.authoring.oracle_loader import load_problems
from grader.authoring.problem import In, Out, Stride
from grader.authoring.spec import KernelSpec, PerformanceCase, load_assignment
from grader.running.cases import arguments
from grader.running.timing.calls import encode_call

SPEC = KernelSpec("k", params=("x_ptr", "w_ptr", "out_ptr", "stride_xm", "stride_wk", "stride_om", "N", "BLOCK"),
                  constexprs=("BLOCK",), grid=("1",), problem="p")


def binding() -> dict[str, object]:
    return {"x_ptr": In("x"), "w_ptr": In("w", transpose=True), "out_ptr": Out("out", (5, 3)),
            "stride_xm": Stride("x_ptr", 0), "stride_wk": Stride("w_ptr", 0), "stride_om": Stride("out_ptr", 0),
            "N": 3}


def test_kernel_arguments_in_contract_order_without_constexprs() -> None:
    inputs = {"x": torch.zeros(5, 7), "w": torch.zeros(3, 7)}
    placement = arguments.Contiguous(inputs, arguments.kernel_buffers(binding()))
    args = arguments.kernel_arguments(SPEC, binding(), placement)
    # w is passed transposed: a (7, 3) view of a contiguous (3, 7) tensor, so its row stride is 1
    assert args == [{"in": 0, "T": False}, {"in": 1, "T": True}, {"out": 0}, 7, 1, 3, 3]
    assert placement.outputs == [{"shape": [5, 3], "dtype": "float32"}]
    assert [tuple(t.shape) for t in placement.tensors()] == [(5, 7), (3, 7)]


def test_call_arguments_number_each_input_once() -> None:
    inputs = {"x": torch.zeros(2, 2), "g": torch.zeros(2)}
    args, kwargs = [In("x"), In("g"), 1e-5], {"again": In("x")}
    placement = arguments.Contiguous(inputs, arguments.call_buffers(args, kwargs))
    assert arguments.call_arguments(args, kwargs, placement) == (
        [{"in": 0, "T": False}, {"in": 1, "T": False}, 1e-5], {"again": {"in": 0, "T": False}})


def test_timing_and_correctness_pass_the_same_scalars(repo_root: Path) -> None:
    """For every kernel case: the battery's guarded placement and timing's contiguous one give the same
    scalar arguments where no stride is involved, and the same buffers in the same positions."""
    assignment = load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")
    problems = load_problems(assignment)
    for case in assignment.cases:
        spec = assignment.kernels.get(case.target)
        if spec is None:
            continue
        problem = problems[spec.problem]
        inputs = problem.make_inputs(case, InputMaker(1))
        perf = PerformanceCase(id=case.id, target=case.target, dims=case.dims, tolerance=case.tolerance, meta=case.meta)
        plan = encode_call(perf, assignment, problem, inputs)
        bound = arguments.kernel_binding(problem, inputs)
        params = [p for p in spec.params if p not in spec.constexprs]
        for param, arg in zip(params, plan.args, strict=True):
            value = bound[param]
            if isinstance(value, (In, Out)):
                assert isinstance(arg, dict), (case.id, param)
            elif not isinstance(value, Stride):
                assert arg == value, (case.id, param)
