"""grader/cli/course.py: no placeholder repository written into a Classroom workflow; it installs the grader from
where this one came from, or from the repository given."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.cli import course, main


def test_classroom_workflow_without_a_repository_is_a_usage_error(tmp_path: Path, repo_root: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(course, "installed_from_github", lambda: None)
    out = tmp_path / "classroom.yml"
    code = main(["--assignments", str(repo_root / "assignments"), "classroom-workflow", "--assignment", "softmax",
                 "--out", str(out)])
    assert code == 2
    assert "needs --grader-repo OWNER/NAME" in capsys.readouterr().err
    assert not out.exists()


def test_classroom_workflow_installs_from_where_the_grader_came_from(tmp_path: Path, repo_root: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(course, "installed_from_github", lambda: "cs-dept/kernel-grader-public")
    out = tmp_path / "classroom.yml"
    assert main(["--assignments", str(repo_root / "assignments"), "classroom-workflow", "--assignment", "softmax",
                 "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert "git+https://github.com/cs-dept/kernel-grader-public" in text and "your-org" not in text
    # a URL is accepted for --grader-repo as well; a malformed one is refused
    assert main(["--assignments", str(repo_root / "assignments"), "classroom-workflow", "--assignment", "softmax",
                 "--out", str(out), "--grader-repo", "https://github.com/course/kg.git"]) == 0
    assert "git+https://github.com/course/kg\"" in out.read_text(encoding="utf-8")
    assert main(["--assignments", str(repo_root / "assignments"), "classroom-workflow", "--assignment", "softmax",
                 "--out", str(out), "--grader-repo", "not a repo"]) == 2
