"""Serialise a GradeResult to Gradescope's results.json (the documented autograder schema).

What a student sees, and when (docs/formats.md says the same): the top level (`output`, `leaderboard`,
`extra_data`) is there from the moment of grading, so it carries the public part of the result only
(grader.publishing.hidden_cases.before_due_date): public cases by name, hidden ones as a count with their points.
Each case is a test of its own with the visibility the spec gives it: public cases `visible`, hidden ones
the spec's hidden_visibility (Gradescope shows them after the due date, when published, or never).
"""

from __future__ import annotations

from typing import Any

from grader.authoring.course_seed import COURSE, fingerprint
from grader.authoring.spec import Assignment
from grader.judging.performance import leaderboard, summary_dict
from grader.publishing.hidden_cases import before_due_date
from grader.publishing.performance_view import performance_line
from grader.results import GradeResult

MAX_TEST_OUTPUT_CHARS = 6000
MAX_TOP_OUTPUT_CHARS = 20000


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - 60] + f"\n... [{len(text) - limit + 60} more characters cut]"


def test_visibility(visibility: str, assignment: Assignment) -> str:
    return "visible" if visibility == "public" else assignment.hidden_visibility


def results_json(result: GradeResult, assignment: Assignment, summary: str) -> dict[str, Any]:
    """`summary`: the student view's Markdown (grader.publishing.report.markdown(..., show_hidden_details=False)),
    the visible top-level output."""
    seen = before_due_date(result, assignment)  # what the visible top level may carry
    tests = []
    for number, case in enumerate(result.cases, start=1):
        tests.append({
            "name": case.title,
            "number": str(number),
            "score": case.score,
            "max_score": case.max_score,
            "status": "passed" if case.passed else "failed",
            "output": clip(case.message, MAX_TEST_OUTPUT_CHARS),
            "tags": list(case.traps),
            "visibility": test_visibility(case.visibility, assignment),
            "extra_data": {"traps": list(case.traps), "case_id": case.case_id, "target": case.target,
                           "elapsed_s": round(case.elapsed_s, 4)},
        })
    for perf in result.performance:
        if perf.max_score <= 0:  # informational (or not measurable here): extra_data and leaderboard only
            continue
        tests.append({
            "name": f"performance {perf.title}",
            "number": str(len(tests) + 1),
            "score": perf.score,
            "max_score": perf.max_score,
            "status": "passed" if perf.timed else "failed",
            "output": clip(performance_line(perf), MAX_TEST_OUTPUT_CHARS),
            "tags": ["performance"],
            "visibility": "visible",
            "extra_data": {"case_id": perf.perf_id, "target": perf.target, "traps": [],
                           "performance": perf.to_dict()},
        })
    out: dict[str, Any] = {
        "score": result.score,
        "execution_time": round(result.execution_time_s, 3),
        "output": clip(summary, MAX_TOP_OUTPUT_CHARS),
        "output_format": "md",
        "test_output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {
            "format_version": result.format_version,
            "assignment": result.assignment,
            "max_score": result.max_score,
            "traps": list(seen.public.traps),  # a hidden case's traps are in its own test
            "hidden_cases": seen.hidden_dict,  # how many and their points (no score: that tells their results)
            # the course's seed is as secret as its hidden cases: named by its fingerprint only (grade.json has it)
            "seed": None if result.seed_source == COURSE else result.seed,
            "seed_source": result.seed_source,
            "seed_fingerprint": fingerprint(result.seed),
            "backend": result.backend,
            "versions": dict(result.versions),
            "notes": list(result.notes),
            "performance": summary_dict(result.performance),
            # why it may be slow (informational): ids only, the report has their numbers
            "performance_traps": list(result.performance_trap_ids),
        },
    }
    board = leaderboard(result.performance)
    if board:
        out["leaderboard"] = board
    return out

