"""Serialise a GradeResult to PrairieLearn's external-grader results file.

PrairieLearn reads `/grade/results/results.json` from the external grader's container when the job
ends ("Grading results", https://prairielearn.readthedocs.io/en/latest/externalGrading/):

    {"gradable": true, "score": 0.75, "message": "...", "output": "...",
     "tests": [{"name": "...", "description": "...", "points": 1, "max_points": 2,
                "message": "...", "output": "..."}]}

`score` is a fraction in [0, 1] (PrairieLearn scales it by the question's points), `gradable: false`
means the submission could not be graded at all (no points, no attempt used up). PrairieLearn shows all of
it to the student at once, so it carries what Gradescope shows before the due date and no more
(grader.publishing.hidden_cases.before_due_date, whatever the spec's hidden_visibility): each public case is a
test, performance cases worth points are tests too, and the hidden cases are one count with their points in
`message` (never their ids, scores or traps). `score` is the full grade, hidden cases included: it is what
PrairieLearn records. `grader grade ... --prairielearn` writes this as `DIR/prairielearn.json`; the course's
grader script copies it to `/grade/results/results.json`.
"""

from __future__ import annotations

from typing import Any

from grader.authoring.spec import Assignment
from grader.publishing.gradescope import MAX_TEST_OUTPUT_CHARS, MAX_TOP_OUTPUT_CHARS, clip
from grader.publishing.hidden_cases import before_due_date
from grader.publishing.performance_view import performance_line
from grader.results import GradeResult


def prairielearn_json(result: GradeResult, assignment: Assignment, summary: str) -> dict[str, Any]:
    """The results document; `summary` is the student-view Markdown report (shown as `output`)."""
    seen = before_due_date(result, assignment)
    tests: list[dict[str, Any]] = []
    for case in seen.public.cases:
        tests.append({
            "name": case.title,
            "description": f"public case {case.case_id}",
            "points": case.score,
            "max_points": case.max_score,
            "message": ("passed" if case.passed else "failed") + (f": {', '.join(case.traps)}" if case.traps else ""),
            "output": clip(case.message, MAX_TEST_OUTPUT_CHARS),
        })
    for perf in seen.public.performance:
        if perf.max_score <= 0:
            continue
        tests.append({"name": f"performance {perf.title}", "description": f"performance case {perf.perf_id}",
                      "points": perf.score, "max_points": perf.max_score, "message": perf.status,
                      "output": clip(performance_line(perf), MAX_TEST_OUTPUT_CHARS)})
    fraction = result.score / result.max_score if result.max_score > 0 else 0.0
    message = f"{result.score:g} / {result.max_score:g} points; traps: {', '.join(seen.public.traps) or 'none'}"
    if seen.hidden is not None:
        message += f"; {seen.hidden.counted}"
    return {
        "gradable": bool(result.cases),
        "score": round(min(1.0, max(0.0, fraction)), 6),
        "message": message,
        "output": clip(summary, MAX_TOP_OUTPUT_CHARS),
        "tests": tests,
    }
