"""Write one grading run's files into its output folder, each atomically.

report.md and report.html are the full (instructor) view; results.json carries the student view
(hidden cases: a count and their points only) as Gradescope's top-level output, and prairielearn.json
only that view. Every report is rendered under a size budget (grader.publishing.size_budget steps down to less
detail), so none exceeds what LMSs accept.
"""

from __future__ import annotations

from pathlib import Path

from grader.atomic import write_json, write_text
from grader.authoring.spec import Assignment
from grader.publishing import report
from grader.publishing.gradescope import MAX_TOP_OUTPUT_CHARS, results_json
from grader.publishing.prairielearn import prairielearn_json
from grader.results import GradeResult

MAX_REPORT_CHARS = 900_000  # report.md and report.html: under 1 MB even in UTF-8 (mostly ASCII)


def write_outputs(
    out_dir: Path, result: GradeResult, assignment: Assignment, pytest_report: str,
    prairielearn: bool = False,
) -> None:
    """The files below; with `prairielearn`, also prairielearn.json (PrairieLearn's external-grader results)."""
    out_dir = Path(out_dir)
    student_markdown = report.markdown(
        result, assignment, show_hidden_details=False, max_chars=MAX_TOP_OUTPUT_CHARS
    )
    write_json(out_dir / "grade.json", result.to_dict())
    write_text(out_dir / "pytest-report.json", pytest_report)  # pytest-json-report's own record, as written
    write_text(out_dir / "report.md", report.markdown(result, assignment, max_chars=MAX_REPORT_CHARS))
    write_text(out_dir / "report.html", report.html(result, assignment, max_chars=MAX_REPORT_CHARS))
    if prairielearn:
        write_json(out_dir / "prairielearn.json", prairielearn_json(result, assignment, student_markdown))
    write_json(out_dir / "results.json", results_json(result, assignment, student_markdown))
