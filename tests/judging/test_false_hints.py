"""False hints (`false-hint`): tl.multiple_of / tl.max_contiguous / tl.max_constancy promises checked
against the values in Triton's interpreter, reported as a zero-point warning, and a GPU `misaligned
address` in code that makes hints named after them.

The semantics are Triton's AxisInfo (include/triton/Analysis/AxisInfo.h): the examples in its comments
and in the hints' docstrings are tests here. Small kernels run in this process through
`InterpretedFunction` with the shims installed for the test only; the slow test grades the fused_layers
mutant end to end through the CLI.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from grader import trap_ids
from grader.authoring.spec import load_assignment
from grader.evidence.worker_error import WorkerError
from grader.judging.errors import classify_error
from grader.judging.false_hints import describe, evidence, false_hint_checks, gpu_fault_note, hint_calls
from grader.results import CaseResult
from grader.running.worker import interpreter_compat
from grader.running.worker.errors import is_fatal_device_error
from grader.running.worker.hint_check import HintLog, actual_runs, check_hint
from tests.conftest import Graded, all_traps, corpus_mutant

ROOT = Path(__file__).resolve().parents[2]
BLOCK = 16


def holds(data, hint: str, values, attrs=None) -> bool:
    return check_hint(np.asarray(data, dtype=np.int32), hint, list(values), attrs or {}) is None


# ------------------------------------------------------------------------------------ the semantics (pure)

AXIS_INFO_2D = [[10, 11, 12, 13, 18, 19, 20, 21],
                [20, 21, 22, 23, 28, 29, 30, 31]]  # contiguity [1, 4], divisibility [1, 2]
AXIS_INFO_COLUMNS = [[12, 16, 20, 24],
                     [13, 17, 21, 25],
                     [14, 18, 22, 26],
                     [15, 19, 23, 27]]  # contiguity [4, 1], divisibility [4, 1]


def test_contiguity_as_axis_info_defines_it() -> None:
    assert holds(AXIS_INFO_2D, "max_contiguous", [1, 4])
    assert not holds(AXIS_INFO_2D, "max_contiguous", [1, 8])  # 13 -> 18 inside a group of 8
    assert not holds(AXIS_INFO_2D, "max_contiguous", [2, 4])  # 10 -> 20 down a column
    assert holds(AXIS_INFO_COLUMNS, "max_contiguous", [4, 1])
    assert [actual_runs(np.array(AXIS_INFO_2D), d) for d in (0, 1)] == [1, 4]
    assert [actual_runs(np.array(AXIS_INFO_COLUMNS), d) for d in (0, 1)] == [4, 1]
    assert holds([0, 1, 2, 3, 8, 9, 10, 11], "max_contiguous", [4])  # tl.max_contiguous's docstring


def test_divisibility_is_of_the_first_element_of_each_contiguous_group() -> None:
    assert holds(AXIS_INFO_2D, "multiple_of", [1, 2])
    assert not holds(AXIS_INFO_2D, "multiple_of", [1, 4])  # the group starting at 10
    assert holds(AXIS_INFO_COLUMNS, "multiple_of", [4, 1])
    assert not holds(AXIS_INFO_COLUMNS, "multiple_of", [8, 1])
    assert holds([64, 80, 96, 112], "multiple_of", [16])  # tl.multiple_of's docstring
    # "[0, 1, 2, 0, 4, 5, 6, 7] has divisibility 1 because its contiguity is 1": every element counts
    assert not holds([0, 1, 2, 0, 4, 5, 6, 7], "multiple_of", [2])


def test_constancy() -> None:
    assert holds([0, 0, 0, 0, 1, 1, 1, 1], "max_constancy", [4])  # tl.max_constancy's docstring
    assert not holds([0, 0, 0, 1, 1, 1, 1, 1], "max_constancy", [4])


def test_a_promised_contiguity_is_the_one_divisibility_refers_to() -> None:
    values = np.arange(32, dtype=np.int32)
    assert holds(values, "multiple_of", [16])  # one run of 32 starting at 0
    # max_contiguous(multiple_of(x, 16), 8): the compiler reads groups of 8, and 8 is no multiple of 16
    found = check_hint(values, "max_contiguous", [8], {"tt.divisibility": [16]})
    assert found is not None and found["hint"] == "multiple_of" and found["value"] == 8
    assert check_hint(values, "multiple_of", [16], {"tt.contiguity": [8]}) is not None
    assert check_hint(values, "multiple_of", [8], {"tt.contiguity": [8]}) is None


def wrapped(pid: int, m: int, block: int = BLOCK) -> np.ndarray:
    return ((pid * block + np.arange(block)) % m).astype(np.int32)


def test_the_tutorial_idiom_is_false_where_the_offsets_wrap() -> None:
    m = 37  # blocks 0 and 1 are 0..15 and 16..31; block 2 is 32..36, then 0..10
    for pid in (0, 1):
        assert holds(wrapped(pid, m), "multiple_of", [BLOCK])
        assert holds(wrapped(pid, m), "max_contiguous", [BLOCK])
    found = check_hint(wrapped(2, m), "multiple_of", [BLOCK], {})
    assert found is not None and found["group"] == 1 and found["index"] == [1] and found["value"] == 33
    found = check_hint(wrapped(2, m), "max_contiguous", [BLOCK], {})
    assert found is not None and found["problem"] == "run" and found["values"][:6] == [32, 33, 34, 35, 36, 0]


def test_true_promises_are_never_flagged() -> None:
    """Every block start a multiple of the block, offsets consecutive: all promises Triton's tutorials
    make on unwrapped offsets hold, for every block size, in 1-D and broadcast to 2-D."""
    for block in (1, 2, 4, 8, 16, 32, 64):
        for pid in range(5):
            offs = (pid * block + np.arange(block)).astype(np.int32)
            for divisor in {d for d in (1, 2, block) if block % d == 0}:
                assert holds(offs, "multiple_of", [divisor]), (block, pid, divisor)
                assert check_hint(offs, "max_contiguous", [block], {"tt.divisibility": [divisor]}) is None
            assert holds(offs, "max_contiguous", [block * 2])  # past the block: says nothing more
            rows = np.broadcast_to(offs[:, None] * 23, (block, 8))  # a row offset times a stride, broadcast
            assert holds(rows, "max_constancy", [1, 8])
        assert holds(np.array([48]), "multiple_of", [16])  # a scalar: pid * BLOCK


def test_a_false_scalar_promise() -> None:
    found = check_hint(np.array([40], dtype=np.int32), "multiple_of", [16], {})
    assert found is not None and found["value"] == 40


# ------------------------------------------------------------------------------------ in the interpreter


def hinted_copy(x_ptr, out_ptr, M, BLOCK_N: tl.constexpr, WRAP: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    if WRAP:
        offs = offs % M
    start = tl.multiple_of(pid * BLOCK_N, BLOCK_N)
    offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK_N), BLOCK_N)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < M) + start * 0, mask=offs < M)


def hinted_pointer(x_ptr, out_ptr, M, BLOCK_N: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    ptrs = tl.multiple_of(x_ptr + offs * 3, 1024)  # pointers are not checked: CPU addresses are not the GPU's
    tl.store(out_ptr + offs, tl.load(ptrs, mask=offs < M), mask=offs < M)


def run_copy(kernel, log: HintLog, wrap: bool | None, m: int = 37) -> None:
    x = torch.arange(3 * m, dtype=torch.float32)
    out = torch.empty(m)
    meta = {"BLOCK_N": BLOCK} if wrap is None else {"BLOCK_N": BLOCK, "WRAP": wrap}
    with interpreter_compat.installed(log):
        InterpretedFunction(kernel)[(triton_cdiv(m, BLOCK),)](x, out, m, **meta)


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def test_the_interpreter_records_the_first_false_promise_and_where() -> None:
    log = HintLog()
    run_copy(hinted_copy, log, wrap=True)
    first = log.first
    assert first is not None
    assert first["hint"] == "multiple_of" and first["program"] == [2, 0, 0] and first["value"] == 33
    assert first["kernel"] == "hinted_copy" and first["function"] == "hinted_copy"
    assert first["file"] == Path(__file__).name and "tl.max_contiguous(tl.multiple_of(offs" in first["code"]
    text = describe(evidence(first))
    assert "tl.multiple_of(..., 16)" in text and "program (2, 0, 0)" in text and "33" in text


def test_true_and_pointer_promises_leave_the_log_empty() -> None:
    log = HintLog()
    run_copy(hinted_copy, log, wrap=False)
    assert log.first is None
    run_copy(hinted_pointer, log, wrap=None)
    assert log.first is None


def test_the_log_keeps_the_first_until_reset() -> None:
    log = HintLog()
    log.record({"n": 1})
    log.record({"n": 2})
    assert log.first == {"n": 1}
    log.reset()
    assert log.first is None


# ------------------------------------------------------------------------------------ the grader's side


def sample_evidence(**changes) -> dict:
    raw = {"hint": "max_contiguous", "problem": "run", "claimed": [16], "dim": 0, "index": [0], "group": 16,
           "values": [32, 33, 34, 35, 36, 0, 1], "program": [2, 0, 0], "kernel": "fused_linear_gelu_kernel",
           "function": "fused_linear_gelu_kernel", "file": "fused_layers.py", "line": 61,
           "code": "rows_a = tl.max_contiguous(tl.multiple_of(rows % M, BLOCK_M), BLOCK_M)"}
    return {**raw, **changes}


def test_evidence_from_the_worker_is_checked_and_bounded() -> None:
    assert evidence(None) is None
    assert evidence(sample_evidence(hint="os.system")) is None
    assert evidence(sample_evidence(claimed="16")) is None
    assert evidence(sample_evidence(dim=True)) is None  # bool is no int here
    ev = evidence(sample_evidence(values=list(range(1000)), code="x" * 10_000))
    assert ev is not None and len(ev["values"]) == 16 and len(ev["code"]) == 200
    text = describe(ev)
    assert text.startswith("tl.max_contiguous(..., 16) (line 61, in fused_linear_gelu_kernel:")
    assert "not 16 consecutive integers" in text


def case(case_id: str, visibility: str, hint: dict | None, target: str = "fused_linear_gelu_kernel",
         passed: bool = True) -> CaseResult:
    return CaseResult(case_id=case_id, target=target, title=case_id, visibility=visibility, max_score=1.0,
                      score=1.0 if passed else 0.0, passed=passed, message="",
                      evidence={"false_hint": hint} if hint else {})


def test_one_zero_point_warning_per_kernel_from_a_public_case_where_there_is_one() -> None:
    assignment = load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")
    cases = [case("hidden-1", "hidden", sample_evidence(line=1)), case("clean", "public", None),
             case("public-1", "public", sample_evidence(line=2)), case("public-2", "public", sample_evidence(line=3))]
    (check,) = false_hint_checks(cases, assignment)
    assert check.case_id == "false-hint-fused_linear_gelu_kernel" and check.target == "fused_linear_gelu_kernel"
    assert (check.max_score, check.score, check.traps) == (0.0, 0.0, (trap_ids.FALSE_HINT,))
    assert check.visibility == "public" and "public-1" in check.message and "line 2" in check.message
    assert "3 cases" in check.message and "no points off" in check.message
    assert false_hint_checks([case("clean", "public", None)], assignment) == []
    # a wrapper's own kernel, not in the contract: the check belongs to the wrapper
    (own,) = false_hint_checks([case("w", "hidden", sample_evidence(kernel="_mm"), target="fused_linear_gelu")],
                               assignment)
    assert own.target == "fused_linear_gelu" and own.visibility == "hidden"


SOURCE = '''import triton.language as tl
from triton.language import multiple_of

def k(x):
    a = tl.max_contiguous(tl.multiple_of(x % M, 16), 16)  # two hints on one line
    b = multiple_of(x, 8)
    # tl.max_constancy(x, 4) in a comment is no call
'''


def test_hint_calls_in_the_source() -> None:
    calls = hint_calls(SOURCE)
    assert [(c.line, c.hint) for c in calls] == [(5, "max_contiguous"), (5, "multiple_of"), (6, "multiple_of")]
    broken = hint_calls(SOURCE + "def oops(:\n")  # does not parse: a line scan
    assert [c.line for c in broken] == [5, 6]
    assert hint_calls("import torch\n") == ()


def misaligned_error() -> WorkerError:
    return WorkerError(type="AcceleratorError", chain=("torch.AcceleratorError",),
                       message="CUDA error: misaligned address\nCUDA kernel errors might be asynchronously reported",
                       root_type="AcceleratorError", root_message="CUDA error: misaligned address")


def test_a_misaligned_address_is_a_false_hint_only_where_the_source_makes_hints() -> None:
    calls = hint_calls(SOURCE)
    assert classify_error(misaligned_error(), calls) == trap_ids.FALSE_HINT
    assert classify_error(misaligned_error()) == trap_ids.RUNTIME_ERROR
    other = dataclasses.replace(misaligned_error(), message="CUDA error: an illegal memory access was encountered",
                                root_message="CUDA error: an illegal memory access was encountered")
    assert classify_error(other, calls) == trap_ids.RUNTIME_ERROR
    note = gpu_fault_note(calls, "fused_layers.py")
    assert "line 5" in note and "line 6" in note and "--backend interpreter" in note


def test_a_misaligned_address_restarts_the_worker() -> None:
    assert is_fatal_device_error(RuntimeError("Triton Error [CUDA]: misaligned address"))
    assert not is_fatal_device_error(ValueError("arange's arguments must be of type tl.constexpr"))


# ------------------------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_the_mutant_is_warned_about_and_keeps_full_marks(grade_text) -> None:
    _, text = corpus_mutant("false_hint")
    graded: Graded = grade_text(text)
    results = graded.results
    assert all_traps(results) == [trap_ids.FALSE_HINT]
    assert results["score"] == results["extra_data"]["max_score"]
    (warning,) = [t for t in results["tests"] if trap_ids.FALSE_HINT in t["tags"]]
    assert warning["max_score"] == 0 and warning["extra_data"]["case_id"] == "false-hint-fused_linear_gelu_kernel"
    assert "rows_a = tl.max_contiguous(tl.multiple_of(rows % M, BLOCK_M), BLOCK_M)" in warning["output"]
    report = (graded.out_dir / "report.md").read_text(encoding="utf-8")
    assert "false-hint" in report and "no points off" in report
