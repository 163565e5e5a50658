"""grader/operations/batch/gradebook.py: the gradebook rebuilt from what DIR holds: graded, outdated,
an error, pending, no submission; then written as the class's files."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.authoring.spec import Assignment, load_assignment
from grader.operations.batch.commits import commit
from grader.operations.batch.gradebook import build_gradebook, write_class_files
from grader.operations.batch.manifest import Manifest
from grader.operations.batch.submissions import Submission
from grader.operations.executors import JobOutcome
from grader.publishing.gradebook import Student
from tests.operations.batch.helpers import fake_result, outcome_files


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def test_rows_from_what_the_folder_holds(tmp_path: Path, assignment: Assignment) -> None:
    manifest = Manifest("fused_layers", "interpreter", 3, "gen-1")
    path = tmp_path / "in.py"
    path.write_text("x = 1\n", encoding="utf-8")

    def submission(student: str, sha: str = "abc", has_file: bool = True) -> Submission:
        return Submission(Student(student), path if has_file else None, f"{student}.py", sha,
                          "" if has_file else "no fused_layers.py")

    record = {"generation": "gen-1", "submission_sha256": "abc"}
    result = fake_result("ann", {"linear-a": True, "linear-b": False})
    commit(tmp_path, JobOutcome("ann", True, outcome_files(result)), record)
    commit(tmp_path, JobOutcome("bob", True, outcome_files(result)), {**record, "generation": "gen-0"})
    commit(tmp_path, JobOutcome("cat", False, {}, "the grading process ended with exit code 1"), record)
    submissions = [submission("ann"), submission("bob"), submission("cat"), submission("dan"),
                   submission("eve", has_file=False)]
    book, results = build_gradebook(tmp_path, submissions, assignment, manifest)
    assert [(r.student, r.status) for r in book.rows] == [
        ("ann", "graded"), ("bob", "outdated"), ("cat", "error"), ("dan", "pending"), ("eve", "no-submission")]
    assert set(results) == {"ann", "bob"} and book.seed == 3
    files, counts = write_class_files(tmp_path, submissions, assignment, manifest)
    assert {p.name for p in files} >= {"gradebook.json", "gradebook.csv", "canvas.csv", "class_report.html"}
    assert counts["graded"] == 1 and counts["pending"] == 1
