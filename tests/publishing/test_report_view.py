"""The view model the templates read (grader/publishing/report_view.py), on hand-made results: what the score
line counts in each view, the targets in the assignment's order, the traps in the result's order, the
Performance section's one line when nothing was measured, the slow reasons with their text, and the legend.
How the templates lay it out is in test_report.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from grader.authoring.catalog import trap_catalog
from grader.authoring.spec import Assignment, load_assignment
from grader.judging.error_maps import CODES
from grader.publishing.error_map_view import MAP_COLOURS
from grader.publishing.hidden_cases import HiddenSummary
from grader.publishing.report_view import view
from grader.publishing.size_budget import DETAIL_LEVELS
from grader.results import PerformanceTrap
from tests.publishing.test_performance_view import timed
from tests.publishing.test_report import sample_result


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def test_the_instructor_view_counts_every_case_by_visibility(assignment: Assignment) -> None:
    shown = view(sample_result(), assignment)
    assert shown.hidden is None and (shown.score_label, shown.score_unit) == ("Score", "")
    assert shown.counts == {"public": (1, 3), "hidden": (0, 1)}
    assert shown.passed_line == "public cases: 1 of 3 passed · hidden cases: 0 of 1 passed"
    assert shown.percent == pytest.approx(100 / 6)
    assert [(t.name, t.kind, t.got, t.total) for t in shown.targets] == [
        ("fused_linear_gelu_kernel", "kernel", 1.0, 5.0), ("row_mean_var_kernel", "kernel", 0.0, 1.0)]
    assert [t.id for t in shown.traps] == ["bias-wrong-axis", "oob-read", "unknown"]
    assert [len(t.cases) for t in shown.traps] == [2, 1, 1]  # the hidden case names bias-wrong-axis too
    assert shown.detail == DETAIL_LEVELS[0] and shown.catalog == trap_catalog(assignment)


def test_the_student_view_is_the_public_part_with_the_hidden_counted(assignment: Assignment) -> None:
    shown = view(sample_result(), assignment, show_hidden_details=False, detail=DETAIL_LEVELS[1])
    assert shown.hidden == HiddenSummary(1, 2.0, "results after the due date")
    assert "linear-kernel-primes" not in [c.result.case_id for c in shown.cases]
    assert (shown.score_label, shown.score_unit) == ("Public cases", " points")
    assert shown.passed_line == "1 of 3 cases passed" and shown.detail == DETAIL_LEVELS[1]
    assert [len(t.cases) for t in shown.traps] == [1, 1, 1]
    scored = dataclasses.replace(sample_result(), performance=(timed(),))
    assert view(scored, assignment, show_hidden_details=False).score_label == "Public and performance cases"


def test_a_zero_point_check_is_not_counted(assignment: Assignment) -> None:
    result = sample_result()
    check = dataclasses.replace(result.cases[0], case_id="gpu-compile", max_score=0.0, score=0.0)
    shown = view(dataclasses.replace(result, cases=(result.cases[0], check)), assignment)
    assert shown.counts == {"public": (1, 1)} and shown.passed_line == "1 of 1 case passed"


def test_nothing_measured_is_one_line(assignment: Assignment) -> None:
    skipped = timed(status="skipped", reason="needs CUDA", student=None)
    result = dataclasses.replace(sample_result(), performance=(skipped, dataclasses.replace(skipped, perf_id="b")))
    assert view(result, assignment).performance_skipped == "2 performance cases not measured: needs CUDA."
    measured = dataclasses.replace(result, performance=(skipped, timed()))
    assert view(measured, assignment).performance_skipped == ""
    assert [row.status for row in view(measured, assignment).performance] == ["skipped", "timed"]


def test_slow_reasons_carry_the_traps_text(assignment: Assignment) -> None:
    found = PerformanceTrap("no-tensor-cores", "fused_linear_gelu_kernel", "\x1b[1mno tl.dot\x1b[0m in 3 loops")
    unknown = PerformanceTrap("not-a-trap", "layernorm", "odd", basis="measured")
    result = dataclasses.replace(sample_result(), performance_traps=(found, unknown))
    first, second = view(result, assignment).slow_reasons
    text = trap_catalog(assignment)["no-tensor-cores"]
    assert (first.title, first.message, first.fix, first.basis) == (text.title, "no tl.dot in 3 loops", text.fix,
                                                                    "prediction")
    assert (second.trap, second.title, second.fix, second.basis) == ("not-a-trap", "not-a-trap", "", "measured")


def test_notes_submission_and_legend(assignment: Assignment) -> None:
    result = dataclasses.replace(sample_result(), notes=("\x1b[31mred\x1b[0m note",), submission="x" * 300)
    shown = view(result, assignment)
    assert shown.notes == ["red note"] and shown.submission == "x" * 200 + " ... [100 more characters cut]"
    assert [code for code, _, _ in shown.legend] == list(CODES)
    assert all(colour == MAP_COLOURS[code] and words for code, colour, words in shown.legend)


def test_the_report_says_which_reasons_were_measured(assignment: Assignment) -> None:
    from grader.publishing.report import html

    measured = PerformanceTrap("re-reading", "layernorm", "reads 803 MB from DRAM where the reference reads 268 MB",
                               {"time_ratio": 3.07}, basis="measured")
    result = dataclasses.replace(sample_result(), performance_traps=(measured,))
    shown = view(result, assignment)
    assert shown.slow_measured and not shown.slow_predicted
    page = html(result, assignment)
    assert 'data-trap="re-reading" data-basis="measured"' in page
    assert "Measured on the GPU: one replay of your timed launches under Nsight Compute" in page
    assert "Predicted from the loads and stores" not in page
    both = dataclasses.replace(result, performance_traps=(measured, PerformanceTrap("launch-bound", "softmax", "x")))
    assert "the rest predicted from the loads and stores" in html(both, assignment)
