"""Trap signatures of a kernel case are built for the meta-parameters of the launch that ran: the case's `meta`,
under what the observation says the launch chose (an autotuned kernel whose configs set BLOCK_N)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from grader.authoring.discovery import assignments_root, find_assignment
from grader.authoring.inputs import case_maker
from grader.authoring.oracle_loader import load_problems
from grader.evidence.observation import Observation
from grader.judging.judge import judge_case, trap_inputs
from grader.seeds import case_seed

CASE = "kernel-rising"  # N_KV = 48, meta BLOCK_N = 16: three key blocks, the max rising in each
CHOSEN_BLOCK_N = 32  # what the kernel's autotune config ran instead: two key blocks


@pytest.fixture(scope="module")
def attention():
    assignment = find_assignment("attention", assignments_root())
    (problem,) = load_problems(assignment).values()
    case = assignment.case(CASE)
    inputs = problem.make_inputs(case, case_maker(case, case_seed(0, case.id)))
    return assignment, problem, case, inputs


def judged(attention, outputs: dict[str, torch.Tensor], block_meta: dict[str, Any]):
    assignment, problem, case, inputs = attention
    tol = assignment.tolerances[case.tolerance].lookup("interpreter", case.dtype)
    observation = Observation(outputs=outputs, block_meta=block_meta)
    return judge_case(case, assignment, inputs, problem.expected(inputs), observation, tol, problem.traps, 0.0,
                      output_dtypes=problem.dtypes_of_outputs(inputs, ("out", "lse"), case.dtype))


def no_rescale_output(attention, block_n: int) -> dict[str, torch.Tensor]:
    """What a kernel missing the rescale stores when it walks keys in blocks of `block_n`."""
    _, problem, case, inputs = attention
    launch = {"kernel": case.target, "grid": None, "meta": {**case.meta, "BLOCK_N": block_n}}
    (prediction,) = problem.traps["no-rescale"]({**inputs, "_launches": (launch,)})
    return {"out": prediction.outputs["out"].to(inputs["q"].dtype), "lse": prediction.outputs["lse"].float()}


def test_a_kernel_case_is_diagnosed_at_the_block_its_launch_ran(attention) -> None:
    _, _, case, _ = attention
    chosen = {**case.meta, "BLOCK_N": CHOSEN_BLOCK_N, "num_warps": 4}
    result = judged(attention, no_rescale_output(attention, CHOSEN_BLOCK_N), chosen)
    assert not result.passed
    assert result.traps == ("no-rescale",), result.message


def test_without_the_chosen_config_the_cases_block_is_what_ran(attention) -> None:
    _, _, case, inputs = attention
    # the evidence says the case's own block ran: the output of another block fits no mistake at that block
    result = judged(attention, no_rescale_output(attention, CHOSEN_BLOCK_N), dict(case.meta))
    assert result.traps == ("unknown",)
    # and an observation that records no meta at all keeps the case's
    launches = trap_inputs(inputs, Observation(), case)["_launches"]
    assert launches == ({"kernel": case.target, "grid": None, "meta": dict(case.meta)},)
