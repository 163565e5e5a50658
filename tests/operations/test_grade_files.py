"""grader/operations/grade_files.py: a `grader grade` request resolved once and each file graded and written; the
user's mistakes (a file that is not there, two files of one name) are said before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.operations.grade_files import grade_files
from grader.operations.requests import GradeFiles, UsageError


def test_mistakes_are_said_before_anything_starts(tmp_path: Path, repo_root: Path) -> None:
    root = repo_root / "assignments"
    with pytest.raises(UsageError, match="is not a file"):
        list(grade_files(GradeFiles(root, "softmax", (tmp_path / "absent.py",), tmp_path / "out"), note=print))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    same = (tmp_path / "a" / "softmax.py", tmp_path / "b" / "softmax.py")
    for path in same:
        path.write_text("", encoding="utf-8")
    with pytest.raises(UsageError, match="share a file name"):
        list(grade_files(GradeFiles(root, "softmax", same, tmp_path / "out"), note=print))
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_each_file_is_graded_and_written(tmp_path: Path, repo_root: Path) -> None:
    submission = tmp_path / "student" / "softmax.py"
    submission.parent.mkdir()
    submission.write_text((repo_root / "reference" / "softmax" / "reference.py").read_text(encoding="utf-8"),
                          encoding="utf-8")
    notes: list[str] = []
    request = GradeFiles(repo_root / "assignments", "softmax", (submission,), tmp_path / "out", backend="interpreter",
                         seed=5)
    (graded,) = list(grade_files(request, note=notes.append))
    assert graded.path == submission.resolve() and graded.out == tmp_path / "out"
    assert graded.result.score == graded.result.max_score and graded.result.seed == 5
    written = json.loads((tmp_path / "out" / "grade.json").read_text(encoding="utf-8"))
    assert written["score"] == graded.result.score and written["backend"] == "interpreter"
    assert notes == []  # a seed given: no course seed to create
