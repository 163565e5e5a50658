"""grader/running/cases/placement.py: where a case's tensors sit in their guarded storages."""

from __future__ import annotations

import torch

from grader.authoring.inputs import InputMaker, case_maker
from grader.authoring.oracle_loader import load_problems
from grader.authoring.spec import load_assignment
from grader.running import guards
from grader.running.cases import arguments
from grader.running.cases.placement import OUTPUT_ROW_GAP, ROW_GAPS, launch_grid, place_buffers
from grader.running.cases.requests import launch_request
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


def test_swapped_heads_layouts_interleave_the_heads_of_every_tensor_and_out_follows_q() -> None:
    """attention's kernel-swapped-heads: q, k, v stored as (B, N, H, D), out like q, lse (B, H, N) swapped too;
    every stride of the contract then differs from the contiguous one (stride_b != H * stride_h)."""
    attention = load_assignment(ROOT / "assignments" / "attention" / "assignment.toml")
    problem = load_problems(attention)["attention"]
    case = attention.case("kernel-swapped-heads")
    inputs = problem.make_inputs(case, case_maker(case, case_seed(3, case.id)))
    placed, _, _ = launch_request(attention.kernels[case.target], case, problem, inputs, count_traffic=False)
    b, h, nq, d = inputs["q"].shape
    by_name = {p.name: p for p in placed.plans.values()}
    assert all(by_name[n].swapped for n in ("q", "k", "v", "out", "lse"))
    assert by_name["q"].view_stride == (nq * h * d, d, h * d, 1)
    assert by_name["out"].view_stride == by_name["q"].view_stride
    assert placed.strides()["q"] == by_name["q"].view_stride
    q_view = guards.view_of(placed.storages[placed.keys.index("in:q:")], by_name["q"])
    assert torch.equal(q_view, inputs["q"]) and q_view.dtype == torch.float16
