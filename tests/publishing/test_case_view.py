"""One case as the report shows it (grader/publishing/case_view.py): what a detailed case carries at each
detail level, that a hidden case is detailed only in the instructor view (and listed for students only
when its results will come), its input in words and its mark."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from grader.authoring.spec import Assignment, load_assignment
from grader.publishing.case_view import case_view, input_description
from grader.publishing.size_budget import DETAIL_LEVELS
from tests.publishing.test_report import bias_axis_evidence, failing_case, sample_result

FULL, SHORTER, LEAST = DETAIL_LEVELS


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def test_a_failed_case_at_each_detail_level(assignment: Assignment) -> None:
    case = failing_case("exact", "public", "Failed: " + "x" * 500, ("bias-wrong-axis",), **bias_axis_evidence())
    full = case_view(case, assignment, False, FULL)
    assert full.listed and full.detailed and full.message == case.message
    assert [c["output"] for c in full.comparisons] == ["out"]
    assert [m.output for m in full.maps] == ["out"] and full.maps[0].worst == (20, 0)  # the comparison's worst
    assert full.where == ()  # the map shows where
    shorter = case_view(case, assignment, False, SHORTER)
    assert shorter.maps == () and shorter.comparisons == full.comparisons
    assert shorter.message.endswith(" ... [108 more characters cut]")
    assert shorter.where == ("out: 456 of 480 wrong; rows all 24; cols all 20",)  # no map: in words
    least = case_view(case, assignment, False, LEAST)
    assert least.message == "[508 characters cut]" and least.comparisons == () and least.maps == ()
    assert least.input == full.input != ""


def test_a_passed_case_has_no_map(assignment: Assignment) -> None:
    case = dataclasses.replace(failing_case("exact", "public", "passed", (), **bias_axis_evidence()), passed=True)
    assert case_view(case, assignment, True, FULL).maps == ()


@pytest.mark.parametrize(("visibility", "listed"), [("after_due_date", True), ("after_published", True),
                                                    ("hidden", False)])
def test_a_hidden_case_is_detailed_for_the_instructor_only(assignment: Assignment, visibility: str,
                                                           listed: bool) -> None:
    hidden = sample_result().cases[2]
    assert hidden.visibility == "hidden"
    spec = dataclasses.replace(assignment, hidden_visibility=visibility)
    student = case_view(hidden, spec, False, FULL)
    assert (student.listed, student.detailed) == (listed, False)
    assert (student.input, student.message, student.comparisons, student.maps, student.where) == ("", "", (), (), ())
    instructor = case_view(hidden, spec, True, FULL)
    assert instructor.listed and instructor.detailed and instructor.message == hidden.message


def test_the_input_in_words(assignment: Assignment) -> None:
    words = input_description(bias_axis_evidence(), assignment.input_kinds)
    assert words == ("M=24 N=20 K=32 · near-constant rows (5.0 + 1e-6 noise) · padded rows (row stride > row length)"
                     " · launched with BLOCK_M=16 BLOCK_N=16 BLOCK_K=16")
    assert input_description({"kind": "odd", "layout": "odd-gap"}, {}) == "odd · odd-gap"  # unknown: as named
    assert input_description({}, {}) == ""


def test_the_mark_of_a_case_and_of_a_zero_point_check(assignment: Assignment) -> None:
    case = sample_result().cases[0]
    marks = {}
    for points in (1.0, 0.0):
        for passed in (True, False):
            shown = case_view(dataclasses.replace(case, max_score=points, passed=passed), assignment, True, FULL)
            marks[points, passed] = (shown.check, shown.mark)
    assert marks == {(1.0, True): (False, "PASS"), (1.0, False): (False, "FAIL"),
                     (0.0, True): (True, "ok"), (0.0, False): (True, "WARN")}
