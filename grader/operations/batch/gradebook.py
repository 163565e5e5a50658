"""The class's files rebuilt from what DIR holds after every run: gradebook.json, gradebook.csv,
canvas.csv and class_report.html (written by grader.publishing.gradebook). With a roster, each row carries its
roster students (grader.operations.batch.roster) and their identity (name, SIS User ID, section), and every roster
student without a submission is a `missing` row."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from grader.authoring.spec import Assignment
from grader.operations.batch.event_log import now
from grader.operations.batch.manifest import Manifest, result_state
from grader.operations.batch.roster import Roster, match_roster, missing_id
from grader.operations.batch.signals import interrupt_point
from grader.operations.batch.submissions import Submission
from grader.publishing.gradebook import (
    Gradebook,
    GradebookRow,
    class_stats,
    graded_row,
    max_points,
    target_points,
    ungraded_row,
    write_gradebook,
)
from grader.publishing.people import Student
from grader.publishing.similarity import SimilaritySummary
from grader.results import GradeResult


@dataclass(frozen=True)
class CanvasOptions:
    """What canvas.csv needs beyond the grades: the assignment column, the roster, the score of a student without
    a gradable file (None: left out, Canvas keeps its grade)."""

    column: str | None = None
    roster: Roster | None = None
    missing_score: float | None = None


def build_gradebook(out: Path, submissions: Sequence[Submission], assignment: Assignment, manifest: Manifest,
                    canvas: CanvasOptions | None = None) -> tuple[Gradebook, dict[str, GradeResult]]:
    """Rows for every discovered student from what DIR holds (and, with a roster, every roster student without a
    submission), and the results behind scored rows."""
    canvas = canvas or CanvasOptions()
    points = target_points(assignment, manifest.backend)
    max_score = max_points(assignment, manifest.backend)
    match = match_roster(canvas.roster, submissions) if canvas.roster is not None else None
    matched = match.by_submission if match is not None else {}
    rows: list[GradebookRow] = []
    results: dict[str, GradeResult] = {}
    for s in submissions:
        student = s.student.with_roster(matched.get(s.id, ()))  # named as the roster names them
        if s.path is None:
            rows.append(ungraded_row(student, "no-submission", max_score, error=s.problem))
            continue
        state, result, record = result_state(out / s.id, manifest, s.sha256)
        if result is not None:
            rows.append(graded_row(student, result, record, current=state == "current"))
            results[s.id] = result
        elif state == "error":
            rows.append(ungraded_row(student, "error", max_score, error=str(record.get("error", "")),
                                     sha256=s.sha256, record=record))
        else:
            rows.append(ungraded_row(student, "pending", max_score, sha256=s.sha256))
    summary = None
    if canvas.roster is not None and match is not None:
        rows = [replace(r, roster=matched.get(r.student, ())) for r in rows]
        taken = {r.student for r in rows}
        for absent in match.missing:
            row_id = missing_id(absent, taken)
            taken.add(row_id)
            rows.append(ungraded_row(
                Student(row_id).with_roster((absent,)), "missing", max_score, roster=(absent,),
                error=f"missing: no submission matched this student of the roster {canvas.roster.source}"))
        rows.sort(key=lambda r: r.student)
        summary = match.summary(canvas.roster)
    book = Gradebook(assignment.id, assignment.title, max_score, points, tuple(rows), now(),
                     manifest.seed, manifest.backend, roster=summary, canvas_column=canvas.column,
                     missing_score=canvas.missing_score)
    return book, results

def write_class_files(out: Path, submissions: Sequence[Submission], assignment: Assignment,
                       manifest: Manifest, canvas: CanvasOptions | None = None,
                       similarity: SimilaritySummary | None = None) -> tuple[list[Path], dict[str, int]]:
    book, results = build_gradebook(out, submissions, assignment, manifest, canvas)
    interrupt_point("gradebook")
    stats = class_stats(book, results, assignment, similarity)
    return write_gradebook(out, book, stats), book.counts()
