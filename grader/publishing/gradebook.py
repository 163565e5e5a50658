"""The class view of a batch: one gradebook row per student, class-wide statistics, and their files.

Rows and statistics are built by pure functions from results (`GradeResult`) and what the batch
recorded; serialisation sits at the edge: `gradebook_json`, `gradebook_csv` and `class_report_html`,
written atomically by `write_gradebook`. docs/gradebook.md documents gradebook.json with a schema.

Row statuses: `graded` (a current result), `outdated` (a result from an earlier seed, backend or
version of the submission; the next run regrades it), `error` (grading itself failed; no score),
`pending` (not graded yet, e.g. the batch was interrupted), `no-submission` (no file to grade), `missing` (a
student of the course's roster with no submission at all).

canvas.csv carries current scores only (`canvas_rows`): a row Canvas would import as a blank (pending, error,
outdated) is left out, never written empty, and the gradebook says why. With a roster (grader.operations.batch.
roster) each row carries the student's Canvas identity (ID, SIS User ID, SIS Login ID, Section).
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader import trap_ids
from grader.atomic import write_json, write_text
from grader.authoring.catalog import trap_catalog
from grader.authoring.spec import Assignment
from grader.publishing.jinja_environment import template_environment
from grader.publishing.people import RosterStudent, Student
from grader.publishing.similarity import SimilaritySummary
from grader.results import GradeResult

GRADEBOOK_FORMAT_VERSION = 1
STATUSES = ("graded", "outdated", "error", "pending", "no-submission", "missing")
SCORED_STATUSES = ("graded", "outdated")
# Columns that differ between two runs of the same batch (when and where it ran), never in what it graded.
RUN_DETAIL_FIELDS = ("grading_time_s", "graded_at", "device")
EXAMPLE_STUDENTS = 5
SLOWEST_SHOWN = 10
TRAPS_SHOWN = 3  # of a gradebook row's traps in the class report; the rest fold ("4 more")
HANGING_TRAP = trap_ids.TIMEOUT
_CSV_TEXT_FIELDS = ("name", "email", "sid", "section", "error")


@dataclass(frozen=True)
class RosterSummary:
    """What the batch's roster matched: the file, its kind, how many students, and what matched nothing."""

    source: str  # the roster file's name
    kind: str  # "canvas" (Canvas's gradebook export) or "map" (file stem or email -> student)
    students: int
    unmatched: tuple[str, ...] = ()  # student ids (submissions) that match no roster student
    conflicts: tuple[str, ...] = ()  # why a roster student's score is not written (two submissions match it, ...)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "kind": self.kind, "students": self.students,
                "unmatched": list(self.unmatched), "conflicts": list(self.conflicts)}


@dataclass(frozen=True)
class GradebookRow:
    student: str
    name: str
    email: str
    sid: str
    status: str
    score: float | None
    max_score: float
    target_scores: Mapping[str, float]  # empty unless scored
    traps: tuple[str, ...]
    backend: str
    seed: int | None
    grading_time_s: float | None
    graded_at: str  # ISO 8601, UTC; "" when not graded
    device: str  # CUDA_VISIBLE_DEVICES of the grade; "" on CPU
    submission_sha256: str
    error: str = ""
    roster: tuple[RosterStudent, ...] = ()  # the roster students this row's score belongs to (a group: several)
    section: str = ""  # the roster's section(s)
    flags: tuple[str, ...] = ()  # traps the instructor must look at (GradeResult.flags): forged work or timings

    def to_dict(self) -> dict[str, Any]:
        return {
            "student": self.student, "name": self.name, "email": self.email, "sid": self.sid,
            "section": self.section, "status": self.status, "score": self.score, "max_score": self.max_score,
            "target_scores": dict(self.target_scores), "traps": list(self.traps),
            "backend": self.backend, "seed": self.seed, "grading_time_s": self.grading_time_s,
            "graded_at": self.graded_at, "device": self.device,
            "submission_sha256": self.submission_sha256, "error": self.error,
            "roster": [r.to_dict() for r in self.roster], "flags": list(self.flags),
        }

    @property
    def known_as(self) -> str:
        """Name, SIS id and section as one line (`Lovelace, Ada · S-100 · Sec 1`); "" when none is known."""
        return Student(self.student, self.name, self.email, self.sid, self.section).known_as


@dataclass(frozen=True)
class Gradebook:
    assignment: str
    title: str
    max_score: float
    targets: Mapping[str, float]  # target -> points, in spec order
    rows: tuple[GradebookRow, ...]
    generated_at: str
    seed: int | None = None
    backend: str = ""
    roster: RosterSummary | None = None  # None: no roster was given (canvas.csv identifies rows as before)
    canvas_column: str | None = None  # canvas.csv's assignment column (None: the title)
    missing_score: float | None = None  # canvas.csv's score for students without a gradable file (None: left out)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        for row in self.rows:
            out[row.status] += 1
        return out


# ------------------------------------------------------------------------------------------- rows


def target_points(assignment: Assignment, backend: str) -> dict[str, float]:
    points: dict[str, float] = dict.fromkeys(assignment.targets, 0.0)
    for case in assignment.cases_for(backend):
        points[case.target] = points.get(case.target, 0.0) + case.points
    return points


def max_points(assignment: Assignment, backend: str) -> float:
    """A gradebook's max_score: what canvas.csv's Points Possible row says."""
    return sum(target_points(assignment, backend).values())


def graded_row(student: Student, result: GradeResult, record: Mapping[str, Any],
               current: bool = True) -> GradebookRow:
    return GradebookRow(
        student=student.id, name=student.name, email=student.email, sid=student.sid, section=student.section,
        status="graded" if current else "outdated",
        score=result.score, max_score=result.max_score,
        target_scores={t: got for t, (got, _total) in result.score_by_target().items()},
        traps=result.traps, backend=result.backend, seed=result.seed,
        grading_time_s=result.execution_time_s,
        graded_at=str(record.get("finished_at", "")), device=str(record.get("device", "")),
        submission_sha256=str(record.get("submission_sha256", "")), flags=result.flags,
    )


def ungraded_row(student: Student, status: str, max_score: float, *, error: str = "", sha256: str = "",
                 record: Mapping[str, Any] | None = None, roster: tuple[RosterStudent, ...] = ()) -> GradebookRow:
    """A row without a score: `error`, `pending`, `no-submission` or `missing`."""
    if status not in STATUSES or status in SCORED_STATUSES:
        raise ValueError(f"not an unscored status: {status!r}")
    record = record or {}
    return GradebookRow(
        student=student.id, name=student.name, email=student.email, sid=student.sid, section=student.section,
        status=status, score=None, max_score=max_score, target_scores={}, traps=(),
        backend=str(record.get("backend", "")), seed=record.get("seed"),
        grading_time_s=record.get("elapsed_s"), graded_at=str(record.get("finished_at", "")),
        device=str(record.get("device", "")), submission_sha256=sha256, error=error, roster=roster,
    )


# ------------------------------------------------------------------------------------------- files


def gradebook_json(book: Gradebook) -> dict[str, Any]:
    scored = [r.score for r in book.rows if r.score is not None]
    return {
        "format_version": GRADEBOOK_FORMAT_VERSION,
        "assignment": book.assignment,
        "title": book.title,
        "max_score": book.max_score,
        "targets": dict(book.targets),
        "seed": book.seed,
        "backend": book.backend,
        "generated_at": book.generated_at,
        "summary": {
            "students": len(book.rows),
            **book.counts(),
            "mean": round(statistics.fmean(scored), 4) if scored else None,
            "median": statistics.median(scored) if scored else None,
        },
        "rows": [r.to_dict() for r in book.rows],
        "roster": book.roster.to_dict() if book.roster is not None else None,
        "canvas": canvas_summary(book),
    }


def csv_columns(book: Gradebook) -> list[str]:
    fixed_head = ["student", "name", "email", "sid", "section", "status", "score", "max_score"]
    fixed_tail = ["traps", "flags", "backend", "seed", "grading_time_s", "graded_at", "device", "submission_sha256",
                  "error"]
    clash = set(book.targets) & set(fixed_head + fixed_tail)
    if clash:
        raise ValueError(f"target names clash with gradebook columns: {sorted(clash)}")
    return fixed_head + list(book.targets) + fixed_tail


def gradebook_csv(book: Gradebook) -> str:
    """One row per student; per-target scores in columns named after the targets; traps `;`-joined.
    Text cells that a spreadsheet would run as a formula (=, +, -, @) are prefixed with `'`."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    columns = csv_columns(book)
    writer.writerow(columns)
    for row in book.rows:
        data = row.to_dict()
        cells = []
        for column in columns:
            if column in book.targets:
                value: Any = row.target_scores.get(column)
            elif column in ("traps", "flags"):
                value = ";".join(getattr(row, column))
            else:
                value = data[column]
            cells.append(_csv_cell(column, value))
        writer.writerow(cells)
    return buffer.getvalue()


def _csv_cell(column: str, value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}" if not value.is_integer() else str(int(value))
    text = str(value)
    if column in _CSV_TEXT_FIELDS and text[:1] in ("=", "+", "-", "@"):
        return "'" + text
    return text


CANVAS_ID_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
CANVAS_POINTS_ROW = "Points Possible"
NO_FILE = ("no-submission", "missing")  # no gradable file: --missing-score applies
# Why a row is not in canvas.csv: an import must never blank a grade (Canvas takes an empty cell as "no score").
LEFT_OUT = {
    "pending": "not graded yet (the batch was interrupted): run the batch again",
    "error": "grading failed (not the student's fault): run the batch again",
    "outdated": "graded from an earlier submission, seed or backend: the next run regrades it",
    "no-submission": "no file to grade: Canvas keeps the grade it has (--missing-score gives one)",
    "missing": "on the roster but no submission: Canvas keeps the grade it has (--missing-score gives one)",
}


@dataclass(frozen=True)
class CanvasRow:
    """One line of canvas.csv: a student as Canvas identifies them, and the score."""

    student: str  # Student
    canvas_id: str
    sis_user_id: str
    sis_login_id: str
    section: str
    score: float


def canvas_rows(book: Gradebook) -> tuple[tuple[CanvasRow, ...], tuple[tuple[str, str], ...]]:
    """canvas.csv's lines, and each gradebook row (student id, why) that gets none. Pure.

    Only current scores are written (status `graded`), and students without a gradable file only when the course
    chose a score for them (`missing_score`). With a roster each line carries the roster student's identity (a
    group submission: one line per member); a submission that matches no roster student gets none. Without a
    roster, `SIS User ID` is Gradescope's student id, else the batch's student id (files named by SIS user id),
    and `SIS Login ID` the email when known."""
    lines: list[CanvasRow] = []
    left_out: list[tuple[str, str]] = []
    for row in book.rows:
        score = row.score if row.status == "graded" else None
        if score is None and row.status in NO_FILE and book.missing_score is not None:
            score = book.missing_score
        if score is None:
            left_out.append((row.student, LEFT_OUT.get(row.status, row.status)))
            continue
        if book.roster is None:
            lines.append(CanvasRow(row.name or row.student, "", row.sid or row.student, row.email, "", score))
        elif not row.roster:
            why = "matches no student of the roster"
            conflict = [c for c in book.roster.conflicts if f"`{row.student}`" in c]
            left_out.append((row.student, conflict[0] if conflict else why))
        else:
            lines.extend(CanvasRow(r.name or row.student, r.canvas_id, r.sis_user_id, r.sis_login_id, r.section,
                                   score) for r in row.roster)
    return tuple(lines), tuple(left_out)


def canvas_summary(book: Gradebook) -> dict[str, Any]:
    """gradebook.json's `canvas`: the column, how many lines canvas.csv has, and who is left out, and why."""
    lines, left_out = canvas_rows(book)
    return {"column": book.canvas_column or book.title, "rows": len(lines), "missing_score": book.missing_score,
            "left_out": [{"student": student, "why": why} for student, why in left_out]}


def canvas_csv(book: Gradebook, column: str | None = None) -> str:
    """Canvas's gradebook-import CSV: the identifying columns `Student`, `ID`, `SIS User ID`, `SIS Login ID`,
    `Section`, then one assignment column; the second line is the "Points Possible" row. (Canvas: "How do I
    import grades in the Gradebook?", https://community.canvaslms.com/t5/Instructor-Guide/How-do-I-import-grades-
    in-the-Gradebook/ta-p/807, and the CSV that Gradebook > Export writes.)

    `column` (else the book's `canvas_column`) names the assignment as Canvas does, `Name (canvas assignment
    id)`, e.g. `Fused layers (12345)`: with the id Canvas updates that assignment, without it Canvas offers to
    create a new one (default: the assignment's title; `grader batch` passes the roster's assignment column when
    its Canvas export has exactly one). Canvas matches students on `ID`, `SIS User ID` or
    `SIS Login ID`; the lines are `canvas_rows`' (current scores only: never a blank that would clear a grade).
    Text cells a spreadsheet would run as a formula get a `'`."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*CANVAS_ID_COLUMNS, column or book.canvas_column or book.title])
    writer.writerow([CANVAS_POINTS_ROW, "", "", "", "", _csv_cell("score", book.max_score)])
    for line in canvas_rows(book)[0]:
        writer.writerow([_csv_cell("name", line.student), _csv_cell("sid", line.canvas_id),
                         _csv_cell("sid", line.sis_user_id), _csv_cell("email", line.sis_login_id),
                         _csv_cell("name", line.section), _csv_cell("score", line.score)])
    return buffer.getvalue()


def write_gradebook(out_dir: Path, book: Gradebook, stats: ClassStats, canvas_column: str | None = None) -> list[Path]:
    """gradebook.json, gradebook.csv, canvas.csv and class_report.html in `out_dir`, each atomically."""
    out_dir = Path(out_dir)
    paths = [out_dir / "gradebook.json", out_dir / "gradebook.csv", out_dir / "canvas.csv",
             out_dir / "class_report.html"]
    write_json(paths[0], gradebook_json(book))
    write_text(paths[1], gradebook_csv(book))
    write_text(paths[2], canvas_csv(book, canvas_column))  # canvas_column: else the book's
    write_text(paths[3], class_report_html(stats))
    return paths


# ------------------------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class HistogramBin:
    label: str
    count: int
    share: float  # of scored students


@dataclass(frozen=True)
class CaseRate:
    case_id: str
    target: str
    title: str
    visibility: str
    points: float
    passed: int
    graded: int

    @property
    def rate(self) -> float:
        return self.passed / self.graded if self.graded else 0.0


@dataclass(frozen=True)
class TrapCount:
    trap: str
    title: str
    section: str
    students: int
    share: float  # of scored students
    examples: tuple[str, ...]
    top_cases: tuple[tuple[str, int], ...]  # (case id, students) where the trap was named most


@dataclass(frozen=True)
class SlowSubmission:
    student: str
    seconds: float
    timed_out_cases: int


@dataclass(frozen=True)
class SpeedCell:
    """One student's timed case in the class's speed table."""

    time_ms: float
    vs_reference: float | None
    speed_of_light: float | None  # % (results.Measurement.pct_of_speed_of_light)

    @property
    def text(self) -> str:
        parts = [f"{self.time_ms:.3f} ms"]
        if self.vs_reference is not None:
            parts.append(f"{self.vs_reference:.2f}x ref")
        if self.speed_of_light is not None:
            parts.append(f"{self.speed_of_light:.0f}% SOL")
        return " · ".join(parts)


@dataclass(frozen=True)
class SpeedRow:
    """A student's timed cases (perf id -> cell; absent: not timed) and why they may be slow (trap ids)."""

    student: str
    cells: Mapping[str, SpeedCell]
    slow: tuple[str, ...]


def speed_rows(scored: Sequence[str],
               results: Mapping[str, GradeResult]) -> tuple[tuple[str, ...], tuple[SpeedRow, ...]]:
    """The performance cases timed for anyone (in result order) and each student with a timed case, fastest first
    on the first case."""
    cases: dict[str, None] = {}
    rows = []
    for student in scored:
        result = results[student]
        cells = {p.perf_id: SpeedCell(p.student.median_ms, p.speedup_vs_reference, p.student.pct_of_speed_of_light)
                 for p in result.performance if p.timed and p.student is not None}
        if cells:
            cases.update(dict.fromkeys(cells))
            rows.append(SpeedRow(student, cells, tuple(result.performance_trap_ids)))
    order = tuple(cases)
    rows.sort(key=lambda r: tuple((r.cells[c].time_ms if c in r.cells else float("inf")) for c in order[:1])
              + (r.student,))
    return order, tuple(rows)


@dataclass(frozen=True)
class ClassStats:
    book: Gradebook
    histogram: tuple[HistogramBin, ...]
    cases: tuple[CaseRate, ...]
    traps: tuple[TrapCount, ...]
    slowest: tuple[SlowSubmission, ...]
    hanging: tuple[SlowSubmission, ...]
    unscored: tuple[GradebookRow, ...] = field(default_factory=tuple)
    similarity: SimilaritySummary | None = None  # the class's similarity.html, when the batch wrote one
    speed_cases: tuple[str, ...] = ()  # performance cases timed for someone (CUDA batches)
    speed: tuple[SpeedRow, ...] = ()

    @property
    def scored(self) -> list[float]:
        return [r.score for r in self.book.rows if r.score is not None]

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.scored) if self.scored else None

    @property
    def median(self) -> float | None:
        return statistics.median(self.scored) if self.scored else None

    @property
    def full_marks(self) -> int:
        return sum(r.score is not None and r.score >= r.max_score > 0 for r in self.book.rows)

    @property
    def canvas_left_out(self) -> tuple[tuple[str, str], ...]:
        """(student, why) of each gradebook row canvas.csv has no line for."""
        return canvas_rows(self.book)[1]

    @property
    def known_as(self) -> dict[str, str]:
        """Student id -> name, SIS id and section as one line, for the students known by more than their id."""
        return {r.student: r.known_as for r in self.book.rows if r.known_as}

    @property
    def missing(self) -> tuple[GradebookRow, ...]:
        """Roster students without a submission."""
        return tuple(r for r in self.book.rows if r.status == "missing")

    @property
    def flagged(self) -> tuple[GradebookRow, ...]:
        """Rows whose grade found forged work or timings (GradebookRow.flags): for the instructor to look at."""
        return tuple(r for r in self.book.rows if r.flags)


def histogram(rows: Sequence[GradebookRow], bins: int = 10) -> tuple[HistogramBin, ...]:
    """Scores as a share of the maximum in `bins` equal bins, then a bin of its own for full marks."""
    scored = [r for r in rows if r.score is not None]
    counts = [0] * (bins + 1)
    for row in scored:
        fraction = row.score / row.max_score if row.max_score else 0.0  # type: ignore[operator]
        counts[bins if fraction >= 1.0 else min(bins - 1, max(0, int(fraction * bins)))] += 1
    labels = [f"{100 * i // bins}–{100 * (i + 1) // bins}%" for i in range(bins)] + ["100%"]
    total = len(scored) or 1
    return tuple(HistogramBin(label, n, n / total) for label, n in zip(labels, counts, strict=True))


def class_stats(book: Gradebook, results: Mapping[str, GradeResult], assignment: Assignment,
                similarity: SimilaritySummary | None = None) -> ClassStats:
    """Pass rate per case, trap frequencies with example students (performance traps among them, named most in
    a target rather than a case), slowest and hanging submissions."""
    scored_ids = [r.student for r in book.rows if r.score is not None and r.student in results]
    catalog = trap_catalog(assignment)
    case_order: dict[str, CaseRate] = {}
    passed: dict[str, int] = {}
    graded: dict[str, int] = {}
    trap_students: dict[str, list[str]] = {}
    trap_cases: dict[str, dict[str, int]] = {}
    for student in scored_ids:
        result = results[student]
        for case in result.cases:
            if case.case_id not in case_order:
                case_order[case.case_id] = CaseRate(case.case_id, case.target, case.title, case.visibility,
                                                    case.max_score, 0, 0)
            graded[case.case_id] = graded.get(case.case_id, 0) + 1
            passed[case.case_id] = passed.get(case.case_id, 0) + int(case.passed)
            for trap in case.traps:
                per_case = trap_cases.setdefault(trap, {})
                per_case[case.case_id] = per_case.get(case.case_id, 0) + 1
        for found in result.performance_traps:  # why it may be slow: counted per target, not per case
            per_target = trap_cases.setdefault(found.trap, {})
            per_target[found.target] = per_target.get(found.target, 0) + 1
        for trap in (*result.traps, *result.performance_trap_ids):
            trap_students.setdefault(trap, []).append(student)
    spec_rank = {c.id: i for i, c in enumerate(assignment.cases)}
    cases = sorted(
        (CaseRate(c.case_id, c.target, c.title, c.visibility, c.points, passed[c.case_id], graded[c.case_id])
         for c in case_order.values()),
        key=lambda c: (spec_rank.get(c.case_id, len(spec_rank)), c.case_id),
    )
    total = len(scored_ids) or 1
    traps = []
    for trap, students in trap_students.items():
        text = catalog.get(trap)
        top = sorted(trap_cases.get(trap, {}).items(), key=lambda kv: (-kv[1], spec_rank.get(kv[0], 0)))[:3]
        examples = tuple(sorted(students)[:EXAMPLE_STUDENTS])
        traps.append(TrapCount(trap, text.title if text else trap, text.section if text else "",
                               len(students), len(students) / total, examples, tuple(top)))
    traps.sort(key=lambda t: (-t.students, t.trap))
    timings = []
    for student in scored_ids:
        result = results[student]
        hung = sum(HANGING_TRAP in c.traps for c in result.cases)
        timings.append(SlowSubmission(student, result.execution_time_s, hung))
    slowest = sorted(timings, key=lambda s: (-s.seconds, s.student))[:SLOWEST_SHOWN]
    hanging = sorted((s for s in timings if s.timed_out_cases), key=lambda s: (-s.timed_out_cases, s.student))
    unscored = tuple(r for r in book.rows if r.score is None and r.status != "missing")  # missing: the roster's
    speed_cases, speed = speed_rows(scored_ids, results)
    return ClassStats(book, histogram(book.rows), tuple(cases), tuple(traps), tuple(slowest), tuple(hanging),
                      unscored, similarity, speed_cases, speed)


# ------------------------------------------------------------------------------------------- HTML


def class_report_html(stats: ClassStats) -> str:
    return template_environment().get_template("class_report.html").render(s=stats, book=stats.book,
                                                                           traps_shown=TRAPS_SHOWN)
