"""`grader new-assignment`: the scaffold validates and passes its selftest as generated."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.authoring.discovery import load_validated, proven_traps
from grader.authoring.scaffold import scaffold_files
from grader.cli import main


def test_scaffold_writes_the_three_folders_of_a_new_course(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    course = tmp_path / "course"  # a course folder of its own, not there yet
    assert main(["new-assignment", "row_sums", "--assignments", str(course / "assignments")]) == 0
    assert {p.relative_to(course).as_posix() for p in course.rglob("*") if p.is_file()} == set(
        scaffold_files("row_sums")) == {
        "assignments/row_sums/assignment.toml", "assignments/row_sums/oracles.py",
        "reference/row_sums/reference.py", "reference/row_sums/mutants.toml",
        "student_template/row_sums/row_sums.py", "student_template/row_sums/README.md"}
    assignment = load_validated(course / "assignments" / "row_sums" / "assignment.toml")
    assert assignment.submission_file == "row_sums.py"
    assert {c.visibility for c in assignment.cases} == {"public", "hidden"}
    assert assignment.reference_solution == course / "reference" / "row_sums" / "reference.py"
    assert assignment.template_dir == course / "student_template" / "row_sums"
    assert "last-column-dropped" in (proven_traps(assignment) or ())  # its mutant is found in reference/
    printed = capsys.readouterr().out
    assert all(str(course / top / "row_sums") in printed for top in ("assignments", "reference", "student_template"))


def test_scaffold_refuses_to_overwrite_any_of_its_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assignments = tmp_path / "assignments"
    (tmp_path / "student_template" / "row_sums").mkdir(parents=True)  # one of the three exists already
    assert main(["--assignments", str(assignments), "new-assignment", "row_sums"]) == 2
    assert "student_template/row_sums already exists" in capsys.readouterr().err
    assert not (assignments / "row_sums").exists() and not (tmp_path / "reference").exists()
    assert main(["new-assignment", "other", "--assignments", str(assignments)]) == 0
    assert main(["new-assignment", "other", "--assignments", str(assignments)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["new-assignment", "Bad-Id", "--assignments", str(assignments)]) == 2


@pytest.mark.slow
def test_scaffold_passes_its_selftest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assignments = tmp_path / "course" / "assignments"
    assert main(["new-assignment", "row_sums", "--assignments", str(assignments)]) == 0
    capsys.readouterr()
    code = main(["selftest", "--assignment", "row_sums", "--assignments", str(assignments),
                 "--backend", "interpreter", "--seed", "7"])
    printed = capsys.readouterr().out
    rows = [line for line in printed.splitlines() if line.startswith(("reference ", "last_column_dropped "))]
    assert code == 0, printed
    assert len(rows) == 2 and all(line.rstrip().endswith(" ok") for line in rows), printed
    assert "2 of 2 as expected" in printed
