"""grader/operations/check_file.py: a `grader check` request: the public cases of the assignment the file's name
fits, run once; a target the assignment does not have is the student's mistake, said in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.operations.check_file import check_file
from grader.operations.interactive import CheckError
from grader.operations.requests import CheckFile


@pytest.mark.slow
def test_the_public_cases_of_the_assignment_the_file_fits(tmp_path: Path, repo_root: Path) -> None:
    submission = tmp_path / "softmax.py"
    submission.write_text((repo_root / "reference" / "softmax" / "reference.py").read_text(encoding="utf-8"),
                          encoding="utf-8")
    root = repo_root / "assignments"
    checked = check_file(CheckFile(root, submission, backend="interpreter", targets=("softmax_kernel",),
                                   out=tmp_path / "out"))
    assert checked.assignment.id == "softmax" and checked.assignment.public
    assert checked.result.public_only and checked.result.score == checked.result.max_score > 0
    assert {c.target for c in checked.result.cases} == {"softmax_kernel"}
    assert (tmp_path / "out" / "report.md").is_file()
    with pytest.raises(CheckError, match="no target 'softmax_kernell'"):
        check_file(CheckFile(root, submission, backend="interpreter", targets=("softmax_kernell",)))


def test_a_check_profiles_only_when_asked(tmp_path: Path, repo_root: Path, monkeypatch) -> None:
    """`grader check` is the quick loop: its grade replays nothing under Nsight Compute unless --profile is given
    (`grader grade` always does)."""
    from grader.cli import build_parser
    from grader.operations import interactive

    asked: list[bool] = []

    def grade(request):
        asked.append(request.profile)
        raise CheckError("stop here")

    monkeypatch.setattr(interactive, "grade", grade)
    submission = tmp_path / "softmax.py"
    submission.write_text("import triton\n", encoding="utf-8")
    parser = build_parser()
    for argv in (["check", str(submission)], ["check", str(submission), "--profile"]):
        args = parser.parse_args(argv)
        with pytest.raises(CheckError, match="stop here"):
            check_file(CheckFile(repo_root / "assignments", submission, backend="interpreter", profile=args.profile))
    assert asked == [False, True]
    assert parser.parse_args(["grade", str(submission), "--assignment", "softmax", "--out", "o"]).profile is True


def test_a_check_times_only_when_asked(tmp_path: Path, repo_root: Path, monkeypatch) -> None:
    """On a GPU a check lists its performance cases untimed unless --timed (or --profile) is given."""
    from grader.cli import build_parser
    from grader.operations import interactive

    asked: list[str] = []

    def grade(request):
        asked.append(request.untimed)
        raise CheckError("stop here")

    monkeypatch.setattr(interactive, "grade", grade)
    submission = tmp_path / "softmax.py"
    submission.write_text("import triton\n", encoding="utf-8")
    parser = build_parser()
    for argv in (["check", str(submission)], ["check", str(submission), "--timed"]):
        args = parser.parse_args(argv)
        with pytest.raises(CheckError, match="stop here"):
            check_file(CheckFile(repo_root / "assignments", submission, backend="interpreter", timed=args.timed))
    assert asked == [interactive.NOT_TIMED_BY_CHECK, ""]
