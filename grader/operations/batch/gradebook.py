"""The class's files rebuilt from what DIR holds after every run: gradebook.json, gradebook.csv,
canvas.csv and class_report.html (written by grader.publishing.gradebook)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from grader.authoring.spec import Assignment
from grader.operations.batch.event_log import now
from grader.operations.batch.manifest import Manifest, result_state
from grader.operations.batch.signals import interrupt_point
from grader.operations.batch.submissions import Submission
from grader.publishing.gradebook import (
    Gradebook,
    GradebookRow,
    class_stats,
    graded_row,
    target_points,
    ungraded_row,
    write_gradebook,
)
from grader.results import GradeResult


def build_gradebook(out: Path, submissions: Sequence[Submission], assignment: Assignment,
                    manifest: Manifest) -> tuple[Gradebook, dict[str, GradeResult]]:
    """Rows for every discovered student from what DIR holds, and the results behind scored rows."""
    points = target_points(assignment, manifest.backend)
    max_score = sum(points.values())
    rows: list[GradebookRow] = []
    results: dict[str, GradeResult] = {}
    for s in submissions:
        if s.path is None:
            rows.append(ungraded_row(s.student, "no-submission", max_score, error=s.problem))
            continue
        state, result, record = result_state(out / s.id, manifest, s.sha256)
        if result is not None:
            rows.append(graded_row(s.student, result, record, current=state == "current"))
            results[s.id] = result
        elif state == "error":
            rows.append(ungraded_row(s.student, "error", max_score, error=str(record.get("error", "")),
                                     sha256=s.sha256, record=record))
        else:
            rows.append(ungraded_row(s.student, "pending", max_score, sha256=s.sha256))
    book = Gradebook(assignment.id, assignment.title, max_score, points, tuple(rows), now(),
                     manifest.seed, manifest.backend)
    return book, results

def write_class_files(out: Path, submissions: Sequence[Submission], assignment: Assignment,
                       manifest: Manifest, canvas_column: str | None = None) -> tuple[list[Path], dict[str, int]]:
    book, results = build_gradebook(out, submissions, assignment, manifest)
    interrupt_point("gradebook")
    return write_gradebook(out, book, class_stats(book, results, assignment), canvas_column), book.counts()
