"""What the student view may say of hidden cases (grader/publishing/hidden_cases.py): the public part of a
result has no hidden case at all, and the hidden ones are a count with their points and when their results
come. That no hidden case reaches a rendered student view is in test_report.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from grader.authoring.spec import Assignment, load_assignment
from grader.publishing.hidden_cases import HiddenSummary, StudentView, before_due_date, hidden_summary, public_part
from tests.publishing.test_performance_view import timed
from tests.publishing.test_report import sample_result


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def test_the_public_part_keeps_public_and_performance_cases_only() -> None:
    result = dataclasses.replace(sample_result(), performance=(timed(),))
    public = public_part(result)
    assert [c.case_id for c in public.cases] == ["linear-kernel-basic", "linear-kernel-exact", "stats-kernel-basic"]
    assert public.performance == result.performance and public.seed == result.seed
    assert public_part(public) == public


def test_hidden_cases_are_counted_with_their_points(assignment: Assignment) -> None:
    result = sample_result()
    assert hidden_summary(result, assignment) == HiddenSummary(1, 2.0, "results after the due date")
    second = dataclasses.replace(result.cases[2], case_id="another", max_score=3.0)
    check = dataclasses.replace(result.cases[2], case_id="a-check", max_score=0.0)  # worth nothing: not counted
    more = dataclasses.replace(result, cases=(*result.cases, second, check))
    when = dataclasses.replace(assignment, hidden_visibility="after_published")
    assert hidden_summary(more, when) == HiddenSummary(2, 5.0, "results when grades are published")
    assert hidden_summary(public_part(result), assignment) is None


def test_the_summary_line() -> None:
    assert HiddenSummary(1, 1.0, "results not shown").line == "1 hidden case worth 1 point: results not shown"
    assert HiddenSummary(18, 27.5, "later").line == "18 hidden cases worth 27.5 points: later"


def test_before_the_due_date_a_student_sees_the_public_part_and_the_hidden_count(assignment: Assignment) -> None:
    result = sample_result()
    seen = before_due_date(result, assignment)
    assert seen == StudentView(public_part(result), HiddenSummary(1, 2.0, "results after the due date"))
    assert seen.hidden is not None and seen.hidden.counted == "1 hidden case worth 2 points"
    assert seen.hidden_dict == {"count": 1, "points": 2.0}
    assert before_due_date(seen.public, assignment).hidden_dict == {"count": 0, "points": 0.0}
