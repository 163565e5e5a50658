"""Write one grading run's files into its output folder, each atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grader import report
from grader.atomic import write_json, write_text
from grader.gradescope import results_json
from grader.results import GradeResult
from grader.spec import Assignment

MAX_REPORT_CHARS = 900_000  # LMSs reject huge outputs; results.json stays far below 1 MB


def write_outputs(out_dir: Path, result: GradeResult, assignment: Assignment, pytest_report: dict[str, Any]) -> None:
    out_dir = Path(out_dir)
    markdown = report.markdown(result, assignment, show_hidden_details=True)
    student_markdown = report.markdown(result, assignment, show_hidden_details=False)
    write_json(out_dir / "grade.json", result.to_dict())
    write_json(out_dir / "pytest-report.json", pytest_report)
    write_text(out_dir / "report.md", markdown[:MAX_REPORT_CHARS])
    write_text(out_dir / "report.html", report.html(result, assignment)[:MAX_REPORT_CHARS])
    write_json(out_dir / "results.json", results_json(result, assignment, student_markdown))
