"""The class report in a real browser (Debian's chromium, headless): a class of the size and shape a course has
(fused_layers' six targets, every case, long names, a grading error's long line, a roster with missing students,
similar pairs) fits a 1200 px wide window: the page never scrolls sideways. Hand-made results: nothing is graded.
Skipped where chromium is not installed (.ci/run installs it)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from grader.authoring.spec import Assignment, load_assignment
from grader.judging.similarity import Pair, Region
from grader.publishing.gradebook import (
    Gradebook,
    RosterStudent,
    RosterSummary,
    Student,
    class_report_html,
    class_stats,
    graded_row,
    target_points,
    ungraded_row,
)
from grader.publishing.similarity import SimilaritySummary
from grader.results import CaseResult, GradeResult
from tests.conftest import chromium
from tests.publishing.test_report_browser import CHROMIUM_FLAGS

PROBE = ("<script>document.body.setAttribute('data-scroll', document.documentElement.scrollWidth + ' ' + "
         "document.documentElement.clientWidth)</script></body>")


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def a_class(assignment: Assignment, students: int = 40) -> tuple[Gradebook, dict[str, GradeResult]]:
    traps = ["bias-wrong-axis", "oob-read", "eps-outside-sqrt", "unbiased-variance", "unwritten-output", "timeout"]
    results, rows = {}, []
    record = {"finished_at": "2026-11-30T00:00:00+00:00", "device": "", "submission_sha256": "f" * 64}
    for n in range(students):
        sid = f"student.with.a.rather.long.login.{n:03d}@university.example.edu"
        cases = tuple(CaseResult(case_id=c.id, target=c.target, title=f"{c.target}: {c.description or c.id}",
                                 visibility=c.visibility, max_score=c.points, score=0.0 if (i + n) % 3 else c.points,
                                 passed=not (i + n) % 3, message="", traps=() if not (i + n) % 3
                                 else (traps[(i + n) % len(traps)],))
                      for i, c in enumerate(assignment.cases_for("interpreter")))
        results[sid] = GradeResult(assignment=assignment.id, submission="fused_layers.py", backend="interpreter",
                                   seed=3, versions={}, cases=cases, execution_time_s=5.0 + n)
        rows.append(graded_row(Student(sid, name=f"Studentwithaverylongfamilyname{n}, Firstname Middlename",
                                       email=sid), results[sid], record))
    rows.append(ungraded_row(Student("broken"), "error", 40.0, error="Traceback: " + "x" * 600))
    missing = RosterStudent("Absent, Student", "4711", "900123456789", "absent.student.login@university.example.edu",
                            "Section 001 (Tuesday lab)")
    rows.append(ungraded_row(Student("absent"), "missing", 40.0, roster=(missing,), error="missing"))
    points = target_points(assignment, "interpreter")
    book = Gradebook(assignment.id, assignment.title, sum(points.values()), points, tuple(rows),
                     "2026-11-30T00:00:00+00:00", 3, "interpreter",
                     roster=RosterSummary("Grades-CS-4xx-Spring.csv", "canvas", students + 1,
                                          unmatched=("a_file_named_after_nobody_in_particular_at_all",)))
    return book, results


def scroll(page: Path, tmp_path: Path, width: int) -> tuple[int, int]:
    """documentElement's scrollWidth and clientWidth of `page` in a `width` px wide window."""
    probe = page.with_name("probe-" + page.name)
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE), encoding="utf-8")
    base = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"]
    dom = subprocess.run([*base, f"--window-size={width},1000", "--dump-dom", probe.as_uri()], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    found = re.search(r'data-scroll="(\d+) (\d+)"', dom)
    assert found, dom[:2000]
    return int(found.group(1)), int(found.group(2))


def test_the_class_report_fits_a_1200_px_window(tmp_path: Path, assignment: Assignment) -> None:
    book, results = a_class(assignment)
    top = Pair("student.with.a.rather.long.login.000@university.example.edu",
               "student.with.a.rather.long.login.001@university.example.edu", 0.97, 0.97, 0.98, 120, 118,
               (Region((1, 120), (3, 121), 900),))
    stats = class_stats(book, results, assignment, SimilaritySummary(41, 1, (top,)))
    page = tmp_path / "class_report.html"
    page.write_text(class_report_html(stats), encoding="utf-8")
    for section in ('id="roster"', 'id="missing"', 'id="unmatched"', 'id="similar-pairs"', 'id="gradebook"',
                    'id="case-pass-rates"', 'id="trap-frequencies"'):
        assert section in page.read_text(encoding="utf-8"), section
    width, client = scroll(page, tmp_path, 1200)
    assert client > 1100 and width <= client, (width, client)
