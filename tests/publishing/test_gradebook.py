"""grader/publishing/gradebook.py: a class's gradebook (gradebook.json, gradebook.csv, Canvas's import CSV,
the class report), on hand-made results."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from grader.authoring.spec import Assignment, load_assignment
from grader.publishing.gradebook import (
    Gradebook,
    RosterStudent,
    RosterSummary,
    Student,
    canvas_csv,
    class_report_html,
    class_stats,
    gradebook_csv,
    gradebook_json,
    graded_row,
    histogram,
    target_points,
    ungraded_row,
)
from tests.conftest import ASSIGNMENT
from tests.operations.batch.helpers import sample_book
from tests.publishing.lms_results import case, result


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


CANVAS_HEADER = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]

def test_canvas_csv_shape() -> None:
    graded = result(case("a", "public", 3.0, 4.0))
    rows = (
        graded_row(Student("s1", name="Doe, Jane", email="jane@example.edu", sid="100"), graded, {}),
        graded_row(Student("s2"), graded, {}),
        ungraded_row(Student("s3", name="=HYPERLINK()"), "no-submission", 4.0),
    )
    book = Gradebook(ASSIGNMENT, "Fused layers", 4.0, {"layernorm": 4.0}, rows, "2026-01-01T00:00:00+00:00")
    table = list(csv.reader(io.StringIO(canvas_csv(book, "Fused layers (12345)"))))
    assert table[0] == [*CANVAS_HEADER, "Fused layers (12345)"]
    assert table[1] == ["Points Possible", "", "", "", "", "4"]
    assert table[2] == ["Doe, Jane", "", "100", "jane@example.edu", "", "3"]
    assert table[3] == ["s2", "", "s2", "", "", "3"]
    assert len(table) == 4  # s3 has no score: left out, never a blank that would clear a grade in Canvas
    assert all(len(row) == 6 for row in table)
    default = list(csv.reader(io.StringIO(canvas_csv(book))))
    assert default[0][-1] == "Fused layers"
    chosen = dataclasses.replace(book, missing_score=0.0)  # the course's policy for no gradable file
    assert list(csv.reader(io.StringIO(canvas_csv(chosen))))[4] == ["'=HYPERLINK()", "", "s3", "", "", "0"]


def test_canvas_csv_never_blanks_a_grade_and_says_why(assignment: Assignment) -> None:
    """Pending, error and outdated rows have no line in canvas.csv (Canvas would clear the grade on an empty
    cell); gradebook.json says why for each."""
    graded = result(case("a", "public", 3.0, 4.0))
    rows = (
        graded_row(Student("done"), graded, {}),
        graded_row(Student("old"), graded, {}, current=False),
        ungraded_row(Student("later"), "pending", 4.0),
        ungraded_row(Student("broke"), "error", 4.0, error="exit code 1"),
    )
    book = Gradebook(ASSIGNMENT, "Fused layers", 4.0, {"layernorm": 4.0}, rows, "2026-01-01T00:00:00+00:00")
    table = list(csv.reader(io.StringIO(canvas_csv(book))))
    assert [row[0] for row in table[2:]] == ["done"]
    left_out = {entry["student"]: entry["why"] for entry in gradebook_json(book)["canvas"]["left_out"]}
    assert set(left_out) == {"old", "later", "broke"}
    assert "interrupted" in left_out["later"] and "regrades" in left_out["old"]


def test_canvas_csv_with_a_roster_names_students_as_canvas_does(assignment: Assignment, repo_root: Path) -> None:
    graded = result(case("a", "public", 3.0, 4.0))
    ada = RosterStudent("Lovelace, Ada", "1001", "S-100", "ada@example.edu", "Sec 1", "file name = SIS Login ID")
    pair = (RosterStudent("One, Pair", "1002", "S-200", "one@example.edu", "Sec 2", "email = SIS Login ID"),
            RosterStudent("Two, Pair", "1003", "S-201", "two@example.edu", "Sec 2", "email = SIS Login ID"))
    gone = RosterStudent("Absent, Al", "1004", "S-300", "al@example.edu", "Sec 1")
    rows = (
        graded_row(Student("ada"), graded, {}), graded_row(Student("submission_7"), graded, {}),
        graded_row(Student("stranger"), graded, {}),
        ungraded_row(Student("al_example.edu"), "missing", 4.0, roster=(gone,), error="missing"),
    )
    rows = (replace(rows[0], roster=(ada,)), replace(rows[1], roster=pair), rows[2], rows[3])
    book = Gradebook(ASSIGNMENT, "Fused layers", 4.0, {"layernorm": 4.0}, rows, "2026-01-01T00:00:00+00:00",
                     roster=RosterSummary("export.csv", "canvas", 4, unmatched=("stranger",)))
    table = list(csv.reader(io.StringIO(canvas_csv(book, "Fused layers (12345)"))))
    assert table[2:] == [["Lovelace, Ada", "1001", "S-100", "ada@example.edu", "Sec 1", "3"],
                         ["One, Pair", "1002", "S-200", "one@example.edu", "Sec 2", "3"],
                         ["Two, Pair", "1003", "S-201", "two@example.edu", "Sec 2", "3"]]
    data = gradebook_json(book)
    doc = (repo_root / "docs" / "gradebook.md").read_text(encoding="utf-8")
    jsonschema.validate(data, json.loads(re.search(r"<!-- schema -->\s*```json\n(.*?)```", doc, re.S).group(1)))
    assert {e["student"]: e["why"] for e in data["canvas"]["left_out"]} == {
        "stranger": "matches no student of the roster",
        "al_example.edu": "on the roster but no submission: Canvas keeps the grade it has (--missing-score gives one)"}
    assert data["rows"][3]["status"] == "missing" and data["rows"][3]["roster"][0]["id"] == "1004"
    assert data["roster"] == {"source": "export.csv", "kind": "canvas", "students": 4, "unmatched": ["stranger"],
                              "conflicts": []}
    with_zero = list(csv.reader(io.StringIO(canvas_csv(replace(book, missing_score=0.0)))))
    assert with_zero[-1] == ["Absent, Al", "1004", "S-300", "al@example.edu", "Sec 1", "0"]
    html = class_report_html(class_stats(book, {}, assignment))
    assert 'id="missing"' in html and "Absent, Al" in html and "1 missing" in html
    assert '<a href="stranger/report.html">stranger</a>' in html and 'id="canvas-left-out"' in html


def test_gradebook_json_and_csv(assignment: Assignment) -> None:
    book, _ = sample_book(assignment)
    data = gradebook_json(book)
    assert data["summary"] == {"students": 5, "graded": 3, "outdated": 0, "error": 1, "pending": 0,
                               "no-submission": 1, "missing": 0, "mean": round((6 + 2 + 2) / 3, 4),
                               "median": 2.0}
    ben = data["rows"][1]
    assert ben["score"] == 2.0 and ben["target_scores"] == {"a": 2.0, "b": 0.0}
    assert ben["traps"] == ["eps-missing", "oob-read"]
    rows = list(csv.DictReader(io.StringIO(gradebook_csv(book))))
    assert [r["student"] for r in rows] == ["ann", "ben", "cat", "dee", "eve"]
    assert rows[1]["score"] == "2" and rows[1]["a"] == "2" and rows[1]["b"] == "0"
    assert rows[1]["traps"] == "eps-missing;oob-read"
    assert rows[3]["status"] == "error" and rows[3]["score"] == "" and rows[3]["a"] == ""
    assert rows[0]["name"] == "'=cmd|ann"  # not a spreadsheet formula
    assert rows[3]["error"].startswith("'-the grading process")

def test_gradebook_json_matches_the_documented_schema(repo_root: Path, assignment: Assignment) -> None:
    doc = (repo_root / "docs" / "gradebook.md").read_text(encoding="utf-8")
    schema = json.loads(re.search(r"<!-- schema -->\s*```json\n(.*?)```", doc, re.S).group(1))
    book, _ = sample_book(assignment)
    jsonschema.validate(gradebook_json(book), schema)

def test_histogram_bins_and_full_marks(assignment: Assignment) -> None:
    book, _ = sample_book(assignment)
    bins = histogram(book.rows)
    assert len(bins) == 11 and bins[-1].label == "100%" and bins[-1].count == 1
    assert bins[3].label == "30–40%" and bins[3].count == 2  # 2 / 6 points
    assert sum(b.count for b in bins) == 3

def test_class_stats_and_report(assignment: Assignment) -> None:
    book, results = sample_book(assignment)
    stats = class_stats(book, results, assignment)
    traps = {t.trap: t for t in stats.traps}
    assert [t.trap for t in stats.traps] == ["eps-missing", "oob-read", "timeout"]  # by count, then name
    assert traps["eps-missing"].students == 1 and traps["eps-missing"].examples == ("ben",)
    assert traps["eps-missing"].top_cases == (("a-1", 1), ("b-1", 1))
    assert traps["timeout"].top_cases[0][0] == "a-1"
    rates = {c.case_id: (c.passed, c.graded) for c in stats.cases}
    assert rates == {"a-1": (1, 3), "a-2": (2, 3), "b-1": (2, 3)}
    assert [s.student for s in stats.slowest] == ["cat", "ben", "ann"]
    assert [(s.student, s.timed_out_cases) for s in stats.hanging] == [("cat", 2)]
    assert [r.student for r in stats.unscored] == ["dee", "eve"]
    html = class_report_html(stats)
    assert '<table id="trap-frequencies">' in html
    assert html.count('<tr data-trap="') == 3
    assert '<a href="ben/report.html">ben</a>' in html
    assert "=cmd|ann" in html and "<script" not in html

def test_target_points_cover_every_target(assignment: Assignment) -> None:
    points = target_points(assignment, "interpreter")
    assert list(points) == list(assignment.targets)
    assert sum(points.values()) == sum(c.points for c in assignment.cases_for("interpreter"))


def test_the_gradebook_table_names_each_student_and_folds_long_trap_lists(assignment: Assignment) -> None:
    graded = result(case("a", "public", 3.0, 4.0))
    many = ("bias-wrong-axis", "oob-read", "eps-outside-sqrt", "unbiased-variance", "timeout")
    ada = Student("ada@uni.edu").with_roster((RosterStudent("Lovelace, Ada", "1001", "S-100", "ada@uni.edu",
                                                            "Sec =1", "file name = SIS Login ID"),))
    rows = (replace(graded_row(ada, graded, {}), traps=many), graded_row(Student("stranger"), graded, {}))
    book = Gradebook(ASSIGNMENT, "Fused layers", 4.0, {"layernorm": 4.0}, rows, "2026-01-01T00:00:00+00:00")
    assert class_stats(book, {}, assignment).known_as == {"ada@uni.edu": "Lovelace, Ada · S-100 · Sec =1"}
    table = class_report_html(class_stats(book, {}, assignment))
    table = table[table.index('<table id="gradebook">'):table.index("</table>", table.index('id="gradebook"'))]
    ada_row = table[table.index('<tr data-student="ada@uni.edu">'):table.index('<tr data-student="stranger">')]
    text = re.sub(r"<[^>]+>", "", ada_row)  # what a reader reads
    assert "Lovelace, Ada" in text and "S-100" in text and "Sec =1" in text and "ada@uni.edu" in text
    assert '<a href="ada@uni.edu/report.html">ada@uni.edu</a>' in ada_row
    shown, folded = ada_row.split("<details>")
    assert [t for t in many if f">{t}<" in shown] == list(many[:3])  # the first three; the rest fold
    assert "+2 more" in folded and all(f">{t}<" in folded for t in many[3:])
    assert '<tr data-student="stranger"><th scope="row" class="who"><div class="nw">' in table  # no name: the id
    csv_rows = list(csv.DictReader(io.StringIO(gradebook_csv(book))))
    assert (csv_rows[0]["name"], csv_rows[0]["sid"], csv_rows[0]["section"]) == ("Lovelace, Ada", "S-100", "Sec =1")
    assert gradebook_json(book)["rows"][0]["section"] == "Sec =1"
    odd = replace(book, rows=(replace(rows[0], section="=SUM(A1)"),))
    assert list(csv.DictReader(io.StringIO(gradebook_csv(odd))))[0]["section"] == "'=SUM(A1)"  # not a formula


def test_the_class_report_has_a_speed_table_on_a_gpu_batch(assignment: Assignment) -> None:
    from dataclasses import replace

    from grader.results import Measurement, PerformanceResult, PerformanceTrap

    book, results = sample_book(assignment)

    def timed(ms: float, sol: float) -> PerformanceResult:
        mine = Measurement("yours", (ms,), ms, 0.0, pct_of_speed_of_light=sol)
        return PerformanceResult("perf-ln", "layernorm", "ln", {"M": 8192}, "float32", "timed", student=mine,
                                 speedup_vs_reference=0.1354 / ms)

    slow = PerformanceTrap("re-reading", "layernorm", "3x the bytes", basis="measured")
    results = {**results, "ann": replace(results["ann"], performance=(timed(0.4, 30.0),), performance_traps=(slow,)),
               "ben": replace(results["ben"], performance=(timed(0.14, 90.0),))}
    stats = class_stats(book, results, assignment)
    assert stats.speed_cases == ("perf-ln",) and [r.student for r in stats.speed] == ["ben", "ann"]  # fastest first
    assert stats.speed[0].cells["perf-ln"].text == "0.140 ms · 0.97x ref · 90% SOL"
    page = class_report_html(stats)
    assert '<table id="speed">' in page and "<code>re-reading</code>" in page
    assert '<table id="speed">' not in class_report_html(class_stats(*sample_book(assignment), assignment))


def test_forged_timings_flag_the_student_in_every_class_file(assignment: Assignment) -> None:
    """A grade whose timing was refused as faster than the hardware (or tampered with) carries a flag: the row's
    `flags`, gradebook.csv's column and the class report's "Flagged for review" table name the student."""
    from grader.results import Measurement, PerformanceResult

    book, results = sample_book(assignment)
    forged = PerformanceResult("perf-ln", "layernorm", "ln", {"M": 8192}, "float32", "error",
                               trap="faster-than-hardware", reason="faster than this GPU can move the data",
                               student=Measurement("yours", (0.001,), 0.001, 0.0, pct_of_speed_of_light=9157.0))
    ben = replace(results["ben"], performance=(forged,))
    assert ben.flags == ("faster-than-hardware",)
    record = {"finished_at": "2026-11-30T00:00:00+00:00", "device": "", "submission_sha256": "f" * 64}
    rows = tuple(graded_row(Student("ben"), ben, record) if r.student == "ben" else r for r in book.rows)
    book = replace(book, rows=rows)
    assert gradebook_json(book)["rows"][1]["flags"] == ["faster-than-hardware"]
    csv_rows = list(csv.DictReader(io.StringIO(gradebook_csv(book))))
    assert csv_rows[1]["flags"] == "faster-than-hardware" and csv_rows[0]["flags"] == ""
    stats = class_stats(book, {**results, "ben": ben}, assignment)
    assert [r.student for r in stats.flagged] == ["ben"]
    page = class_report_html(stats)
    assert 'id="flagged"' in page and '<tr data-student="ben"><td><a href="ben/report.html">ben</a>' in page
    assert 'id="flagged"' not in class_report_html(class_stats(*sample_book(assignment), assignment))
