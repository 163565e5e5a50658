"""What the report says under each trap (grader/publishing/trap_view.py): the element shown is one that
shows that trap; the example is the case that shows it best; an untouched template is told it writes
nothing, with the fix for that. Hand-made results (fast); the same on real grading runs is in
tests/e2e/test_report_e2e.py (slow)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from grader.authoring.spec import Assignment, load_assignment
from grader.publishing import report
from grader.publishing.report_view import view
from grader.results import CaseResult
from tests.publishing.test_report_wording import MISSING, grade_result, ln_case


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def comparison(index: list[int], actual: Any, expected: float) -> dict[str, Any]:
    return {"output": "out", "ok": False, "mismatches": 40, "numel": 96, "nan_mismatches": 8, "inf_mismatches": 0,
            "max_abs_error": 1.0, "worst_index": index, "worst_actual": actual, "worst_expected": expected,
            "summary": "out: 40 of 96 differ"}


def error_map() -> dict[str, Any]:
    return {"out": {"shape": [8, 12], "cell": [1, 1], "grid": ["." * 12] * 8, "tile": None, "wrong": 40,
                    "total": 96}}


def test_each_trap_shows_the_element_that_shows_it(assignment: Assignment) -> None:
    """bias_wrong_axis on a padded input: the NaNs are the out-of-bounds read, the finite errors the bias."""
    evidence = {
        "tolerance": {"atol": 1e-5, "rtol": 1e-5}, "comparisons": [comparison([7, 0], "nan", 2.0)],
        "error_maps": error_map(),
        "illustrations": {"bias-wrong-axis": {"out": {"index": [3, 5], "actual": 1.25, "expected": 0.25}},
                          "oob-read": {"out": {"index": [7, 0], "actual": "nan", "expected": 2.0}}},
    }
    case = ln_case("linear", ("bias-wrong-axis", "oob-read"), assignment, **evidence)
    bias, oob = view(grade_result(case), assignment).traps
    assert [(e["worst_index"], e["worst_actual"]) for e in bias.elements] == [([3, 5], 1.25)]
    assert [(e["worst_index"], e["worst_actual"]) for e in oob.elements] == [([7, 0], "nan")]
    assert bias.maps[0].worst == (3, 5) and oob.maps[0].worst == (7, 0)
    md = report.markdown(grade_result(case), assignment)
    assert "`out[3, 5]` is 1.25, expected 0.25" in md and "`out[7, 0]` is nan, expected 2" in md


def test_the_example_is_the_case_that_shows_the_trap_best(assignment: Assignment) -> None:
    """eps-missing on a random row is 1 element barely off; on near-constant rows it is far off."""
    def with_element(case_id: str, actual: float, expected: float) -> CaseResult:
        evidence = {"tolerance": {"atol": 1e-5, "rtol": 1e-5}, "error_maps": error_map(),
                    "comparisons": [comparison([2, 0], actual, expected)],
                    "illustrations": {MISSING: {"out": {"index": [2, 0], "actual": actual, "expected": expected}}}}
        return ln_case(case_id, (MISSING,), assignment, **evidence)

    barely = with_element("ln-kernel-basic", 1.1028862, 1.1028615)
    far = with_element("ln-kernel-near-constant", 3.2, 0.4)
    (trap,) = view(grade_result(barely, far), assignment).traps
    assert trap.example is not None and trap.example.result.case_id == "ln-kernel-near-constant"
    (trap,) = view(grade_result(barely), assignment).traps  # the only one there is
    assert trap.example is not None and trap.example.result.case_id == "ln-kernel-basic"


def test_an_untouched_template_is_told_its_kernel_writes_nothing(assignment: Assignment) -> None:
    nothing = ln_case("ln-kernel-basic", ("unwritten-output",), assignment, nothing_written=["out"])
    some = ln_case("ln-kernel-tail", ("unwritten-output",), assignment)
    (told,) = view(grade_result(nothing), assignment).traps
    assert told.advice.startswith("Your kernel has not written any output yet: the template's TODO is still there")
    for text in (report.terminal(grade_result(nothing), assignment), report.markdown(grade_result(nothing), assignment),
                 report.html(grade_result(nothing), assignment)):
        assert "has not written any output yet" in text
    (partly,) = view(grade_result(nothing, some), assignment).traps  # one case wrote something
    assert partly.advice == ""
    assert "has not written any output yet" not in report.terminal(grade_result(some), assignment)
    # and its fix is the TODO, not grid coverage; where a kernel wrote part of its output, grid coverage it is
    assert told.fix.startswith("Fill in the TODO") and told.exposed_by == "Every case: the kernel stores nothing yet."
    for text in (report.terminal(grade_result(nothing), assignment), report.markdown(grade_result(nothing), assignment),
                 report.html(grade_result(nothing), assignment)):
        assert "Fill in the TODO" in text and "grid covers" not in text
    assert "grid covers every output element" in partly.fix


def test_a_timeout_while_importing_is_told_about_module_level_code(assignment: Assignment) -> None:
    """A timeout of the file's import gets a fix about module-level code; a case that timed out running keeps the
    trap's own (kernel loops)."""
    hung = ln_case("ln-kernel-basic", ("timeout",), assignment, at_import=True)
    ran = ln_case("ln-kernel-tail", ("timeout",), assignment)
    (told,) = view(grade_result(hung), assignment).traps
    assert told.id == "timeout"  # the trap id stays: a timeout is a timeout
    assert told.advice.startswith("Importing your file did not finish: everything at module level")
    assert told.exposed_by == "Importing the submission, before any case ran."
    assert told.explanation.startswith("The grader imports your file once, before any case, with a time limit")
    assert told.fix.startswith("Keep only imports, constants and definitions at module level")
    assert "range(0, K, BLOCK_K)" not in told.fix
    for text in (report.terminal(grade_result(hung), assignment), report.markdown(grade_result(hung), assignment),
                 report.html(grade_result(hung), assignment)):
        assert "Keep only imports, constants and definitions at module level" in " ".join(text.split())
    (running,) = view(grade_result(ran), assignment).traps
    assert running.advice == "" and "range(0, K, BLOCK_K)" in running.fix
    assert running.text is not None and running.explanation == running.text.explanation
