"""The class report in a real browser (Debian's chromium, headless), measured as a reader sees it: a class of the
size and shape a course has (60 students, fused_layers' six targets, long names and ids, long trap lists, a group,
a grading error's long line, a roster with a missing student, similar pairs) in a 1200 px and a 1920 px window.

What is measured, by a script run in the page after layout (`PROBE`): no word of any table cell is broken across
lines or sticks out of its cell (text in <pre> aside: a traceback may wrap anywhere), every gradebook row is at
most a few lines tall, the page itself never scrolls sideways (the gradebook's own box may, and then keeps the
student column and the header row in view), and the page uses the window's width. Hand-made results: nothing is
graded. Skipped where chromium is not installed (.ci/run installs it)."""

from __future__ import annotations

import html
import json
import re
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from grader.authoring.spec import Assignment, load_assignment
from grader.judging.similarity import Pair, Region
from grader.publishing.gradebook import (
    Gradebook,
    RosterSummary,
    class_report_html,
    class_stats,
    graded_row,
    target_points,
    ungraded_row,
)
from grader.publishing.people import RosterStudent, Student
from grader.publishing.similarity import SimilaritySummary
from grader.results import CaseResult, GradeResult
from tests.conftest import chromium
from tests.publishing.test_report_browser import CHROMIUM_FLAGS

STUDENTS = 60
ROW_HEIGHT_MAX_PX = 100  # a name over two lines, the id under it, or three trap tags and "4 more": about 4 lines
WIDTHS = (1200, 1920)

# Runs in the page after layout; writes what it measured as JSON into <pre id="probe">.
PROBE = """<script>
(function () {
  const words = [];
  for (const cell of document.querySelectorAll('td, th')) {
    const box = cell.getBoundingClientRect(), style = getComputedStyle(cell);
    const left = box.left + parseFloat(style.borderLeftWidth) + parseFloat(style.paddingLeft) - 1;
    const right = box.right - parseFloat(style.borderRightWidth) - parseFloat(style.paddingRight) + 1;
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (node.parentElement.closest('pre')) continue;
      for (const m of node.data.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const rects = [...range.getClientRects()].filter(r => r.width > 0);
        if (!rects.length) continue;  // not shown (a folded list)
        const lines = new Set(rects.map(r => Math.round(r.top))).size;
        const from = Math.min(...rects.map(r => r.left)), to = Math.max(...rects.map(r => r.right));
        if (lines > 1 || from < left || to > right) {
          words.push({word: m[0], lines: lines, word_px: Math.round(to - from), cell_px: Math.round(right - left),
                      table: cell.closest('table').id});
        }
      }
    }
  }
  const root = document.documentElement, main = document.querySelector('main');
  const report = {window: window.innerWidth, page_scroll: root.scrollWidth, page_client: root.clientWidth,
                  main: Math.round(main.getBoundingClientRect().width), words: words};
  try {
    const book = document.getElementById('gradebook'), scroller = book.parentElement, body = book.tBodies[0];
    const rows = [...body.rows].map(r => Math.round(r.getBoundingClientRect().height));
    report.box_scrolls = scroller.scrollWidth > scroller.clientWidth;
    scroller.scrollLeft = scroller.scrollWidth;  // as far right as it goes: the student column stays in view
    scroller.scrollTop = 600;  // and down: the header row stays in view
    const inner = scroller.getBoundingClientRect();
    Object.assign(report, {
      box: Math.round(inner.width), scrolled_left: scroller.scrollLeft, rows: rows.length,
      row_max: Math.max(...rows), tallest: body.rows[rows.indexOf(Math.max(...rows))].dataset.student,
      who_left: Math.round(body.rows[20].cells[0].getBoundingClientRect().left - inner.left - scroller.clientLeft),
      head_top: Math.round(book.tHead.rows[0].cells[4].getBoundingClientRect().top - inner.top - scroller.clientTop),
    });
  } catch (e) {
    report.error = String(e);  // the gradebook is not a table with a header row and student rows in a box
  }
  const out = document.createElement('pre');
  out.id = 'probe';
  out.textContent = JSON.stringify(report);
  document.body.appendChild(out);
})();
</script></body>"""


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


TRAPS = ["bias-wrong-axis", "oob-read", "eps-outside-sqrt", "unbiased-variance", "unwritten-output", "timeout",
         "low-arithmetic-intensity", "weight-not-transposed"]


def a_class(assignment: Assignment, students: int = STUDENTS) -> tuple[Gradebook, dict[str, GradeResult]]:
    """`students` graded students (every one on the roster, one a group of two, each with a long name, a long
    login as id and up to eight traps), one grading error, one roster student without a submission, one
    submission matching nobody."""
    results, rows = {}, []
    record = {"finished_at": "2026-11-30T00:00:00+00:00", "device": "", "submission_sha256": "f" * 64}
    cases_run = assignment.cases_for("interpreter")
    for n in range(students):
        login = f"student.with.a.rather.long.login.{n:03d}@university.example.edu"
        failing = n % (len(TRAPS) + 1)  # 0 to 8 traps
        cases = tuple(CaseResult(case_id=c.id, target=c.target, title=c.id, visibility=c.visibility,
                                 max_score=c.points, score=0.0 if i < failing else c.points, passed=i >= failing,
                                 message="", traps=(TRAPS[i],) if i < failing else ())
                      for i, c in enumerate(cases_run))
        results[login] = GradeResult(assignment=assignment.id, submission=f"{login}.py", backend="interpreter",
                                     seed=3, versions={}, cases=cases, execution_time_s=5.0 + n)
        members = [RosterStudent(f"Studentwithaverylongfamilyname-Doubled{n}, Firstname Middlename", f"{4000 + n}",
                                 f"9001234{n:05d}", login, f"Section {n % 4:03d} (Tuesday lab, Room 12)")]
        if n == 7:  # a group submission: both members
            members.append(RosterStudent("Partner, Second", "4999", "900999999", "partner@university.example.edu",
                                         "Section 003 (Tuesday lab, Room 12)"))
        row = graded_row(Student(login).with_roster(members), results[login], record)
        rows.append(replace(row, roster=tuple(members)))
    rows.append(ungraded_row(Student("a_file_named_after_nobody_in_particular_at_all"), "error", 40.0,
                             error="Traceback: " + "x" * 600))
    missing = RosterStudent("Absent, Student", "4711", "900123456789", "absent.student.login@university.example.edu",
                            "Section 001 (Tuesday lab, Room 12)")
    rows.append(ungraded_row(Student("absent.student.login@university.example.edu").with_roster((missing,)),
                             "missing", 40.0, roster=(missing,), error="missing"))
    points = target_points(assignment, "interpreter")
    book = Gradebook(assignment.id, assignment.title, sum(points.values()), points, tuple(rows),
                     "2026-11-30T00:00:00+00:00", 3, "interpreter",
                     roster=RosterSummary("Grades-CS-4xx-Spring.csv", "canvas", students + 2,
                                          unmatched=("a_file_named_after_nobody_in_particular_at_all",)))
    return book, results


def class_report(assignment: Assignment, folder: Path) -> Path:
    book, results = a_class(assignment)
    top = Pair(book.rows[0].student, book.rows[1].student, 0.97, 0.97, 0.98, 120, 118,
               (Region((1, 120), (3, 121), 900),))
    stats = class_stats(book, results, assignment, SimilaritySummary(STUDENTS, 1, (top,)))
    page = folder / "class_report.html"
    page.write_text(class_report_html(stats), encoding="utf-8")
    return page


def measure(page: Path, tmp_path: Path, width: int) -> dict[str, Any]:
    """What PROBE measured in `page` in a `width` px wide window."""
    probe = page.with_name(f"probe-{width}-{page.name}")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE), encoding="utf-8")
    base = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"]
    dom = subprocess.run([*base, f"--window-size={width},1000", "--dump-dom", probe.as_uri()], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    return json.loads(html.unescape(found.group(1)))  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def measured(assignment: Assignment, tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("class-report")
    page = class_report(assignment, folder)
    for section in ('id="roster"', 'id="missing"', 'id="unmatched"', 'id="similar-pairs"', 'id="gradebook"',
                    'id="case-pass-rates"', 'id="trap-frequencies"', 'id="unscored"'):
        assert section in page.read_text(encoding="utf-8"), section
    return {width: measure(page, folder, width) for width in WIDTHS}


@pytest.mark.parametrize("width", WIDTHS)
def test_no_word_is_broken_or_sticks_out_of_its_cell(measured: dict[int, dict[str, Any]], width: int) -> None:
    assert measured[width]["words"] == []


@pytest.mark.parametrize("width", WIDTHS)
def test_gradebook_rows_stay_a_few_lines_tall(measured: dict[int, dict[str, Any]], width: int) -> None:
    seen = measured[width]
    assert "error" not in seen, seen["error"]
    assert seen["rows"] == STUDENTS + 2
    assert seen["row_max"] <= ROW_HEIGHT_MAX_PX, (seen["row_max"], seen["tallest"])


@pytest.mark.parametrize("width", WIDTHS)
def test_the_page_never_scrolls_sideways_and_uses_the_window(measured: dict[int, dict[str, Any]], width: int) -> None:
    seen = measured[width]
    assert "error" not in seen, seen["error"]
    assert seen["window"] == seen["page_client"] == width
    assert seen["page_scroll"] <= seen["page_client"], seen
    assert seen["main"] >= width - 40 and seen["box"] >= width - 60, seen  # no fixed page width


def test_the_gradebook_scrolls_in_its_own_box_keeping_student_and_header_in_view(
        measured: dict[int, dict[str, Any]]) -> None:
    narrow = measured[1200]
    assert "error" not in narrow, narrow["error"]
    assert narrow["box_scrolls"] and narrow["scrolled_left"] > 0, narrow  # every target column: wider than 1200 px
    assert abs(narrow["who_left"]) <= 1 and abs(narrow["head_top"]) <= 1, narrow  # sticky, scrolled right and down
    assert measured[1920]["box"] > narrow["box"] + 600

