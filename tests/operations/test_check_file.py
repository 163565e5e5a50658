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


@pytest.mark.parametrize(("flags", "untimed", "profile"), [
    ((), True, False), (("--timed",), False, False), (("--timed", "--profile"), False, True),
    (("--profile",), False, True),
])
def test_a_check_times_and_profiles_only_when_asked(tmp_path: Path, repo_root: Path, monkeypatch, flags, untimed,
                                                    profile) -> None:
    """`grader check` is the quick loop: on a GPU its performance cases are listed untimed unless --timed, and
    replayed under Nsight Compute only with --profile (which times them too); `grader grade` always does both."""
    from grader.cli import build_parser
    from grader.cli.grading import cmd_check
    from grader.operations import interactive

    asked = []

    def grade(request):
        asked.append((request.untimed, request.profile))
        raise CheckError("stop here")

    monkeypatch.setattr(interactive, "grade", grade)
    submission = tmp_path / "softmax.py"
    submission.write_text("import triton\n", encoding="utf-8")
    parser = build_parser()
    args = parser.parse_args(["check", str(submission), "--backend", "interpreter", *flags])
    with pytest.raises(CheckError, match="stop here"):
        cmd_check(args, repo_root / "assignments")
    assert asked == [(interactive.NOT_TIMED_BY_CHECK if untimed else "", profile)]
    assert parser.parse_args(["grade", str(submission), "--assignment", "softmax", "--out", "o"]).profile is True
