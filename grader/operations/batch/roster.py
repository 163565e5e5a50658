"""The course's roster (`grader batch --roster FILE`): who each submission belongs to, as Canvas identifies them.

Two kinds of file, told apart by their header:

- **Canvas's gradebook export** (Grades > Export): `Student, ID, SIS User ID, SIS Login ID, Section, <assignment
  columns...>` (any order, more columns allowed; a BOM, quoted names with commas, the `Points Possible` row and
  Canvas's other non-student rows are skipped; so is Canvas's "Student, Test"). A submission matches a student when
  its file stem (or folder name) is the student's SIS Login ID, SIS User ID or Canvas ID, or when an email from
  Gradescope's submission metadata is the SIS Login ID (or its part before the `@`), or Gradescope's student id
  is the SIS User ID. Case is ignored.
- **A two-column map**: `file stem or email, student` per line; the student is their SIS User ID, unless a header
  line names the column it fills (`key,SIS Login ID`, `stem,ID`; `student` means SIS User ID).

A Canvas export's assignment columns (`Name (assignment id)`, e.g. `Softmax (12345)`) are kept with their
`Points Possible`: when there is exactly one, it is canvas.csv's column unless one is given
(`Roster.assignment_column`), and `points_warning` says when its points differ from the grade's maximum.

Parsing (`parse_roster`) and matching (`match_roster`) are pure; `read_roster` reads the file (BatchError for one
the grader cannot read). A submission matching two roster students by its file name, or two submissions matching
one student, is a conflict: that score is written nowhere and the gradebook says why. A Gradescope group
submission matches each member by email.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from grader.operations.batch.folder import BatchError
from grader.operations.batch.submissions import Submission, student_id
from grader.publishing.gradebook import RosterSummary
from grader.publishing.people import RosterStudent, Student
from grader.publishing.plurals import counted

CANVAS = "canvas"
MAP = "map"
CANVAS_COLUMNS = {"student": "name", "id": "canvas_id", "sis user id": "sis_user_id",
                  "sis login id": "sis_login_id", "section": "section"}
MAP_TARGETS = {"student": "sis_user_id", "sis user id": "sis_user_id", "sis login id": "sis_login_id",
               "id": "canvas_id"}
MAP_KEYS = {"file", "stem", "file stem", "email", "key", "submission", "login", "username"}
# Canvas rows that are not students: the points row, the posting-policy row, the course's test student
POINTS_POSSIBLE = "points possible"
NOT_STUDENTS = {POINTS_POSSIBLE, "", "student, test", "test student"}
# Canvas names an assignment's column `Name (assignment id)`; its other columns (totals, grades) carry no id
ASSIGNMENT_COLUMN = re.compile(r"^(?P<name>.*\S)\s*\((?P<id>\d+)\)$")


@dataclass(frozen=True)
class RosterAssignment:
    """One assignment column of a Canvas export: its header as Canvas wrote it, and its Points Possible (None:
    not a number)."""

    column: str
    points_possible: float | None = None


@dataclass(frozen=True)
class Roster:
    source: str  # the file's name, for messages
    kind: str  # CANVAS or MAP
    students: tuple[RosterStudent, ...]
    # MAP only: each key (file stem or email, lower case) -> index in `students`
    keys: Mapping[str, int] = field(default_factory=dict)
    assignments: tuple[RosterAssignment, ...] = ()  # CANVAS only: its assignment columns, in order

    @property
    def assignment_column(self) -> str | None:
        """The export's assignment column when it has exactly one (canvas.csv's default column), else None."""
        return self.assignments[0].column if len(self.assignments) == 1 else None

    def points_warning(self, column: str, max_score: float) -> str | None:
        """One line when the export's Points Possible for `column` is not `max_score` (canvas.csv's scores are out of
        `max_score`; Canvas keeps its own points, so each percentage would be wrong); None when they agree or the
        export does not have the column."""
        found = next((a for a in self.assignments if _same_column(a.column, column)), None)
        if found is None or found.points_possible is None or math.isclose(found.points_possible, max_score):
            return None
        return (f"warning: the roster {self.source} says {found.column} has {counted(found.points_possible, 'point')} "
                f"possible, but this assignment's grades are out of {max_score:g}: set its points in Canvas to "
                f"{max_score:g} before importing canvas.csv")


@dataclass(frozen=True)
class RosterMatch:
    """Which roster students each submission belongs to (matched_by set), who has none, what matched nothing."""

    by_submission: Mapping[str, tuple[RosterStudent, ...]]  # submission id -> its roster students
    missing: tuple[RosterStudent, ...]  # roster students no submission matched
    unmatched: tuple[str, ...]  # submission ids matching no roster student
    conflicts: tuple[str, ...]  # why a score is written for nobody

    def summary(self, roster: Roster) -> RosterSummary:
        return RosterSummary(roster.source, roster.kind, len(roster.students), self.unmatched, self.conflicts)


def read_roster(path: Path) -> Roster:
    """The roster in `path` (UTF-8, with or without a BOM; Windows-1252 as Excel may save it)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise BatchError(f"cannot read the roster {path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("cp1252", errors="replace")
    return parse_roster(text, Path(path).name)


def _cell(row: Sequence[str], index: int | None) -> str:
    return row[index].strip() if index is not None and index < len(row) else ""


def parse_roster(text: str, source: str = "roster.csv") -> Roster:
    """A Canvas gradebook export or a two-column map (module docstring); BatchError names what is wrong."""
    rows = [row for row in csv.reader(io.StringIO(text.lstrip("\ufeff"))) if any(cell.strip() for cell in row)]
    if not rows:
        raise BatchError(f"the roster {source} is empty")
    header = [cell.strip().lower() for cell in rows[0]]
    if "student" in header and any(name in header for name in ("id", "sis user id", "sis login id")):
        return _canvas(rows, header, source)
    return _map(rows, source)


def _canvas(rows: list[list[str]], header: list[str], source: str) -> Roster:
    where = {attr: header.index(name) if name in header else None for name, attr in CANVAS_COLUMNS.items()}
    students = []
    for row in rows[1:]:
        fields = {attr: _cell(row, index) for attr, index in where.items()}
        if fields["name"].lower() in NOT_STUDENTS or not any(
                fields[k] for k in ("canvas_id", "sis_user_id", "sis_login_id")):
            continue  # Points Possible, a posting-policy row, the test student, a row with no id to match
        students.append(RosterStudent(**fields))
    if not students:
        raise BatchError(f"the roster {source} (a Canvas gradebook export) lists no students with an ID, "
                         "SIS User ID or SIS Login ID")
    return Roster(source, CANVAS, tuple(students), assignments=_assignments(rows, where["name"]))


def _assignments(rows: list[list[str]], name_column: int | None) -> tuple[RosterAssignment, ...]:
    """The export's assignment columns (header `Name (id)`) with their number in the Points Possible row."""
    points_row = next((row for row in rows[1:] if _cell(row, name_column).lower() == POINTS_POSSIBLE), [])
    found = []
    for index, header in enumerate(rows[0]):
        if ASSIGNMENT_COLUMN.match(header.strip()):
            try:
                points: float | None = float(_cell(points_row, index))
            except ValueError:
                points = None
            found.append(RosterAssignment(header.strip(), points))
    return tuple(found)


def _same_column(a: str, b: str) -> bool:
    """Canvas matches a column by its assignment id when it has one, else by its name."""
    first, second = ASSIGNMENT_COLUMN.match(a.strip()), ASSIGNMENT_COLUMN.match(b.strip())
    if first and second:
        return first.group("id") == second.group("id")
    return a.strip() == b.strip()


def _map(rows: list[list[str]], source: str) -> Roster:
    if any(len([c for c in row if c.strip()]) != 2 for row in rows):
        bad = next(i for i, row in enumerate(rows, 1) if len([c for c in row if c.strip()]) != 2)
        raise BatchError(f"the roster {source} is neither Canvas's gradebook export (a header with Student, ID, "
                         "SIS User ID, SIS Login ID, Section) nor a map of two columns (file stem or email, "
                         f"student): line {bad} has {len([c for c in rows[bad - 1] if c.strip()])} values")
    first = [c.strip().lower() for c in rows[0] if c.strip()]
    target = "sis_user_id"
    if first[1] in MAP_TARGETS or first[0] in MAP_KEYS:
        target = MAP_TARGETS.get(first[1], "sis_user_id")
        rows = rows[1:]
    students: list[RosterStudent] = []
    index: dict[tuple[str, ...], int] = {}
    keys: dict[str, int] = {}
    for row in rows:
        key, who = [c.strip() for c in row if c.strip()]
        if key.lower() in keys:
            raise BatchError(f"the roster {source} maps {key!r} twice")
        identity = (target, who.lower())
        if identity not in index:
            index[identity] = len(students)
            students.append(RosterStudent(name=who, **{target: who}))
        keys[key.lower()] = index[identity]
    return Roster(source, MAP, tuple(students), keys)


# ------------------------------------------------------------------------------------------- matching


def _stem(submission: Submission) -> str:
    """The file stem or folder name the submission came as (before it was made folder-safe)."""
    if submission.path is not None and submission.source == submission.path.name:
        return submission.path.stem  # a file of a flat folder
    return Path(submission.source).parts[0] if submission.source else submission.id  # a student's folder


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(";") if v.strip()]


def _candidates(roster: Roster, submission: Submission) -> list[tuple[str, list[tuple[int, str]]]]:
    """For each thing the submission is known by, in order (its name, then each Gradescope email and student id):
    the roster students it names, with how."""
    found: list[tuple[str, list[tuple[int, str]]]] = []
    stem = _stem(submission).lower()
    if roster.kind == MAP:
        found.append(("name", [(roster.keys[stem], "file name")] if stem in roster.keys else []))
        for email in _split(submission.student.email):
            hit = roster.keys.get(email.lower())
            found.append(("email", [(hit, "email")] if hit is not None else []))
        return found
    columns = (("sis_login_id", "SIS Login ID"), ("sis_user_id", "SIS User ID"), ("canvas_id", "ID"))
    hits = [(i, f"file name = {label}") for i, s in enumerate(roster.students) for attr, label in columns
            if getattr(s, attr).lower() == stem and stem]
    found.append(("name", hits))
    for email in _split(submission.student.email):
        low = email.lower()
        found.append(("email", [(i, "email = SIS Login ID") for i, s in enumerate(roster.students)
                                if s.sis_login_id and (s.sis_login_id.lower() == low
                                                       or ("@" not in s.sis_login_id
                                                           and s.sis_login_id.lower() == low.split("@")[0]))]))
    for sid in _split(submission.student.sid):
        found.append(("sid", [(i, "Gradescope student id = SIS User ID") for i, s in enumerate(roster.students)
                              if s.sis_user_id and s.sis_user_id.lower() == sid.lower()]))
    return found


def match_roster(roster: Roster, submissions: Sequence[Submission]) -> RosterMatch:
    """Pure: which roster students each submission belongs to. Its file name is tried first; failing that, each
    of its submitters (Gradescope's metadata: email, then student id) names at most one student."""
    claims: dict[int, list[tuple[str, str]]] = {}  # roster index -> (submission id, how)
    conflicts: list[str] = []
    for submission in submissions:
        chosen: list[tuple[int, str]] = []
        for kind, hits in _candidates(roster, submission):
            distinct = list(dict.fromkeys(i for i, _ in hits))
            if len(distinct) > 1:
                names = ", ".join(_who(roster.students[i]) for i in distinct)
                conflicts.append(f"`{submission.id}`: its {kind} matches {len(distinct)} roster students ({names})")
                chosen = []
                break
            if distinct and distinct[0] not in (i for i, _ in chosen):
                chosen.append(next(h for h in hits if h[0] == distinct[0]))
            if kind == "name" and chosen:
                break  # the file name decided
        for index, how in chosen:
            claims.setdefault(index, []).append((submission.id, how))
    by_submission: dict[str, list[RosterStudent]] = {}
    for index, claimants in sorted(claims.items()):
        student = roster.students[index]
        if len(claimants) > 1:
            subs = " and ".join(f"`{sid}`" for sid, _ in claimants)
            conflicts.append(f"{subs} both match roster student {_who(student)}: neither score is written for them")
            continue
        submission_id, how = claimants[0]
        by_submission.setdefault(submission_id, []).append(replace(student, matched_by=how))
    missing = tuple(s for i, s in enumerate(roster.students) if i not in claims)
    unmatched = tuple(s.id for s in submissions if s.id not in by_submission
                      and not any(f"`{s.id}`" in c for c in conflicts))
    return RosterMatch({k: tuple(v) for k, v in by_submission.items()}, missing, unmatched, tuple(conflicts))


def identified(submissions: Sequence[Submission], roster: Roster | None) -> dict[str, Student]:
    """Submission id -> its student as the roster names them where it matched one (`Student.with_roster`), else
    as the submission itself says (Gradescope's metadata, or only the id)."""
    matched = match_roster(roster, submissions).by_submission if roster is not None else {}
    return {s.id: s.student.with_roster(matched.get(s.id, ())) for s in submissions}


def _who(student: RosterStudent) -> str:
    ids = ", ".join(f"{label} {value}" for label, value in (("SIS Login ID", student.sis_login_id),
                                                           ("SIS User ID", student.sis_user_id),
                                                           ("ID", student.canvas_id)) if value)
    return f"{student.name or '(no name)'} ({ids})" if ids else student.name


def missing_id(student: RosterStudent, taken: set[str]) -> str:
    """A gradebook id for a roster student without a submission (unique among `taken`, folder-safe)."""
    base = student_id(student.sis_login_id or student.sis_user_id or student.canvas_id or student.name) or "student"
    candidate, n = base, 1
    while candidate.lower() in {t.lower() for t in taken}:
        n += 1
        candidate = f"{base}-missing{'' if n == 2 else n - 1}"
    return candidate
