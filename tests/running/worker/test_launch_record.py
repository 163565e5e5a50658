"""`inputs["_launches"]`: the block sizes a case's outputs were computed with, for trap functions.

A kernel case gets the grader's own launch (the case's `meta`); a wrapper case each launch its launch
record holds (kernel, grid, the values of the kernel's tl.constexpr parameters, positional or keyword).
The softmax padding trap then predicts a wrapper's fixed BLOCK_N = 256 on N = 10, which no guess of
block sizes up to 2 * next_power_of_2(N) covers.
"""

from __future__ import annotations

from pathlib import Path

import torch
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from grader.authoring.inputs import InputMaker
from grader.authoring.oracle_loader import load_problems
from grader.authoring.spec import load_assignment
from grader.evidence.observation import Observation
from grader.judging.diagnosis import match_traps
from grader.judging.judge import trap_inputs
from grader.judging.replay import launch_meta
from grader.running.worker.launch_record import LaunchRecord, constexpr_params
from grader.seeds import case_seed

ROOT = Path(__file__).resolve().parents[3]


def copy_rows(x_ptr, out_ptr, N, stride, BLOCK_N: tl.constexpr, EVEN: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    tl.store(out_ptr + cols, tl.load(x_ptr + cols, mask=cols < N), mask=cols < N)


def recorded(args: tuple, kwargs: dict) -> dict:
    """What the worker's recorder keeps of one launch of `copy_rows` (no kernel runs)."""
    kernel = InterpretedFunction(copy_rows)
    launch = LaunchRecord(args, kwargs, keep=[])
    launch.innermost_call(kernel, args, dict(kwargs, grid=(3,)))
    return {"kernel": "copy_rows", "replay": launch.encode()}


def test_the_record_names_the_constexpr_parameters() -> None:
    assert constexpr_params(InterpretedFunction(copy_rows)) == ["BLOCK_N", "EVEN"]
    x = torch.zeros(3, 10)
    record = recorded((x, x, 10, 10), {"BLOCK_N": 256, "EVEN": False, "num_warps": 4})
    assert record["replay"]["constexprs"] == ["BLOCK_N", "EVEN"]
    (launch,) = launch_meta([record])
    assert launch == {"kernel": "copy_rows", "grid": (3,), "meta": {"BLOCK_N": 256, "EVEN": False}}


def test_positional_block_sizes_count_too() -> None:
    x = torch.zeros(3, 10)
    (launch,) = launch_meta([recorded((x, x, 10, 10, 64, True), {})])
    assert launch["meta"] == {"BLOCK_N": 64, "EVEN": True}


def test_only_plain_bounded_values_come_through() -> None:
    names = ["A", "B", "C", "D"]
    forged = {"kernel": "k", "replay": {"kernel": "k", "params": names, "constexprs": names,
                                        "args": [1 << 40, {"tensor": {}}, "x" * 1000, 7], "kwargs": {}, "grid": [1]}}
    (launch,) = launch_meta([forged, {"kernel": "no record"}, "junk"])
    assert launch["meta"] == {"D": 7}
    no_names = {"kernel": "k", "replay": {"kernel": "k", "params": ["A"], "args": [8], "kwargs": {"B": 8}}}
    assert launch_meta([no_names])[0]["meta"] == {}  # without the constexpr names nothing is a block size


def test_a_kernel_case_gets_the_graders_own_launch() -> None:
    spec = load_assignment(ROOT / "assignments" / "softmax" / "assignment.toml")
    case = spec.case("online-basic")
    inputs = trap_inputs({"x": torch.zeros(1)}, Observation(row_strides={"x": 100}), case)
    assert inputs["_launches"] == ({"kernel": "online_softmax_kernel", "grid": None, "meta": {"BLOCK_N": 32}},)
    assert inputs["_row_strides"] == {"x": 100}
    wrapper = trap_inputs({}, Observation(launches=()), spec.case("softmax-basic"))
    assert wrapper["_launches"] == ()


def test_softmax_padding_uses_the_launched_block() -> None:
    """A wrapper that always launches BLOCK_N = 256 with zero padding, on N = 10: only the launch record
    tells the padding trap that 246 lanes were padded."""
    spec = load_assignment(ROOT / "assignments" / "softmax" / "assignment.toml")
    (problem,) = load_problems(spec).values()
    case = spec.case("softmax-basic")
    inputs = problem.make_inputs(case, InputMaker(case_seed(3, case.id)))
    x = inputs["x"]
    n = x.shape[1]
    padded = torch.cat([x, torch.zeros(x.shape[0], 256 - n)], dim=1)
    e = torch.exp(padded - padded.max(dim=-1, keepdim=True).values)
    got = {"out": (e / e.sum(dim=-1, keepdim=True))[:, :n]}
    expected = problem.expected(inputs)
    tol = spec.tolerances[case.tolerance].lookup("interpreter", "float32")
    launch = {"kernel": "online_softmax_kernel", "grid": (4,), "meta": {"BLOCK_N": 256}}
    named = [m.trap for m in match_traps(problem.traps, {**inputs, "_launches": (launch,)}, got, expected, tol)]
    assert named == ["padding-zero-not-neg-inf"]
    guessed = [m.trap for m in match_traps(problem.traps, {**inputs, "_launches": ()}, got, expected, tol)]
    assert guessed == []  # what the grader named before it read the launch record: `unknown`
