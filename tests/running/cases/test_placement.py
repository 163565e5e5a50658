"""grader/running/cases/placement.py: where a case's tensors sit in their guarded storages."""

from __future__ import annotations

import torch

from grader.authoring.inputs import InputMaker
from grader.authoring.oracle_loader import load_problems
from grader.authoring.spec import load_assignment
from grader.running import guards
from grader.running.cases import arguments
from grader.running.cases.placement import OUTPUT_ROW_GAP, ROW_GAPS, launch_grid, place_buffers
from grader.seeds import case_seed
from tests.conftest import ROOT

SOFTMAX = load_assignment(ROOT / "assignments" / "softmax" / "assignment.toml")
PROBLEM = load_problems(SOFTMAX)["softmax"]


def placed_kernel_case(case_id: str):
    case = SOFTMAX.case(case_id)
    inputs = PROBLEM.make_inputs(case, InputMaker(case_seed(3, case.id)))
    binding = arguments.kernel_binding(PROBLEM, inputs)
    spec = SOFTMAX.kernels[case.target]
    return case, inputs, place_buffers(case, arguments.kernel_buffers(binding), inputs,
                                       grid=launch_grid(spec, binding, case))


def test_launch_grid() -> None:
    case = next(c for c in SOFTMAX.cases if c.target == "softmax_kernel")
    spec = SOFTMAX.kernels["softmax_kernel"]
    assert launch_grid(spec, {"M": case.dims["M"], "N": case.dims["N"]}, case) == (case.dims["M"],)
    assert launch_grid(spec, {}, case) is None  # a name the binding lacks: no grid here


def test_inputs_sit_in_nan_guards_and_outputs_have_a_sentinel_gap() -> None:
    case, inputs, placed = placed_kernel_case("kernel-basic")
    x_plan = placed.plans[placed.keys[0]]
    assert x_plan.role == "input" and x_plan.row_stride == x_plan.cols  # contiguous layout: no input gap
    out_plan = next(p for p in placed.plans.values() if p.role == "output")
    assert out_plan.row_stride == out_plan.cols + OUTPUT_ROW_GAP
    storage = placed.storages[0]
    view = storage[x_plan.offset: x_plan.offset + x_plan.rows * x_plan.row_stride].view(x_plan.rows, -1)
    assert torch.equal(view[:, : x_plan.cols], inputs["x"])
    guard = storage[: x_plan.guard]
    assert bool(torch.isnan(guard).all()) and x_plan.guard >= guards.GUARD_MIN
    assert placed.row_strides() == {"x": x_plan.cols}


def test_row_gap_layouts_give_each_buffer_its_own_gap() -> None:
    _, _, placed = placed_kernel_case("kernel-row-gap")
    gaps = [p.row_stride - p.cols for p in placed.plans.values() if p.ndim == 2]
    assert len(set(gaps)) == len(gaps) and all(g in ROW_GAPS for g in gaps)
