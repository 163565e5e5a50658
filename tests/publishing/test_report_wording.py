"""Report wording students read: a trap explained away by the other cases is not named in the case; a fix
fits where the student reads it; a zero-point check is marked apart from the cases.

Fast: hand-made results through grader.operations.grade.consolidate_traps and grader.publishing.report.
What the report says under each trap is in test_trap_view.py; the same on real grading runs is in
tests/e2e/test_report_e2e.py (slow)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from grader.authoring.catalog import trap_catalog
from grader.authoring.spec import Assignment, load_assignment
from grader.operations.grade import consolidate_traps
from grader.publishing import report
from grader.publishing.report_view import view
from grader.results import CaseResult, GradeResult

OUTSIDE, MISSING = "eps-outside-sqrt", "eps-missing"


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def ln_case(case_id: str, traps: tuple[str, ...], assignment: Assignment, **evidence: Any) -> CaseResult:
    catalog = trap_catalog(assignment)  # the assignment's traps and the generic ones
    head = "; ".join(f"{catalog[t].title} [{t}]" for t in traps)
    return CaseResult(case_id=case_id, target="layernorm_forward_kernel", title=f"ln: {case_id}",
                      visibility="public", max_score=1.0, score=0.0, passed=False,
                      message=f"Failed: {head}\nout: 96 of 96 elements differ", traps=traps, evidence=evidence)


def test_a_trap_explained_away_is_not_named_in_the_case(assignment: Assignment) -> None:
    both = ln_case("ln-kernel-basic", (OUTSIDE, MISSING), assignment)
    alone = ln_case("ln-kernel-eps", (OUTSIDE,), assignment)
    first, second = consolidate_traps([both, alone], assignment)
    assert first.traps == (OUTSIDE,) and second == alone
    assert first.message.splitlines()[0] == f"Failed: {assignment.traps[OUTSIDE].title} [{OUTSIDE}]"
    assert MISSING not in first.message and assignment.traps[MISSING].title not in first.message
    assert "not named" not in first.message
    assert first.message.endswith(f"your other cases show {assignment.traps[OUTSIDE].title} [{OUTSIDE}], so "
                                  "that is the diagnosis here.)")
    assert first.evidence["explained_away"] == [MISSING]  # the instructor's record keeps it


def test_an_inherited_trap_renames_the_head_too(assignment: Assignment) -> None:
    kernel = dataclasses.replace(ln_case("ln-kernel-basic", ("oob-write",), assignment),
                                 message="Failed: Out-of-bounds write [oob-write]")
    wrapper = CaseResult(case_id="ln-basic", target="layernorm", title="layernorm: basic", visibility="public",
                         max_score=1.0, score=0.0, passed=False, traps=("unknown",),
                         message="Failed: Wrong values no trap explains [unknown]\nout: 3 of 5 differ")
    _, inherited = consolidate_traps([kernel, wrapper], assignment)
    assert inherited.traps == ("oob-write",)
    assert inherited.message.startswith("Failed: Out-of-bounds write [oob-write]\nout: 3 of 5 differ\n")
    assert "[unknown]" not in inherited.message and "shows oob-write in its own cases" in inherited.message


def grade_result(*cases: CaseResult) -> GradeResult:
    return GradeResult(assignment="fused_layers", submission="fused_layers.py", backend="interpreter", seed=1,
                       versions={}, cases=cases, execution_time_s=1.0)


def test_the_runtime_error_fix_fits_where_the_student_reads_it(assignment: Assignment) -> None:
    """Gradescope's report tells the student to reproduce an exception with `grader check`; `grader check` itself
    (a public run) does not send the student to the command they are running."""
    case = CaseResult(case_id="ln-basic", target="layernorm", title="layernorm: basic", visibility="public",
                      max_score=1.0, score=0.0, passed=False, traps=("runtime-error",),
                      message="layernorm(...) raised ZeroDivisionError (fused_layers.py, line 3): division by zero")
    graded = grade_result(case)
    checked = dataclasses.replace(graded, public_only=True)
    assert "reproduce it with `grader check`" in report.terminal(graded, assignment)
    for text in (report.terminal(checked, assignment), report.markdown(checked, assignment),
                 report.html(checked, assignment)):
        assert "grader check" not in text.replace("public cases only (grader check)", "")
        assert "call your function in Python" in text


def test_a_zero_point_check_is_marked_apart_and_not_counted(assignment: Assignment) -> None:
    """The GPU compile check of a kernel whose body is `pass` passes (it compiles): it is a check worth nothing,
    not a passed case, in every view."""
    failed = ln_case("ln-kernel-basic", ("unwritten-output",), assignment, nothing_written=["out"])
    check = CaseResult(case_id="gpu-compile-layernorm_forward_kernel", target="layernorm_forward_kernel",
                       title="layernorm_forward_kernel: compiles for the grading GPU (sm_90)", visibility="public",
                       max_score=0.0, score=0.0, passed=True, message="The GPU compiler accepts it")
    result = grade_result(failed, check)
    (target,) = view(result, assignment).targets
    assert target.passed == 0 and len(target.scored) == 1 and len(target.cases) == 2
    terminal = report.terminal(result, assignment)
    assert "(0 of 1 case)" in terminal and "1 of 2" not in terminal
    assert "ok    layernorm_forward_kernel: compiles for the grading GPU (sm_90)  (a check, no points)" in terminal
    assert "PASS" not in terminal
    assert "| `layernorm_forward_kernel` | kernel | 0 / 1 | 0 / 1 |" in report.markdown(result, assignment)
    html = report.html(result, assignment)
    assert '<span class="status check ok"' in html and "check, no points" in html and "✔" not in html
