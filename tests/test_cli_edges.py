"""grader/cli.py's edges, as a new user meets them: `--version`, help text on every option, no output folder left
behind by a usage error, and no placeholder repository written into a Classroom workflow."""

from __future__ import annotations

import argparse
import importlib.metadata
from pathlib import Path

import pytest

from grader import cli
from grader.cli import build_parser, main


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"grader {importlib.metadata.version('kernel-grader')}"


def test_every_option_and_argument_has_help() -> None:
    parser = build_parser()
    commands = _subcommands(parser)
    assert {"grade", "check", "batch", "selftest", "gradescope-bundle", "classroom-workflow"} <= set(commands)
    silent = []
    for name, command in [("grader", parser), *commands.items()]:
        for action in command._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if not action.help:
                silent.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert silent == []
    # the ones a new user found bare, by name
    helps = {a.dest: a.help for a in commands["grade"]._actions}
    assert "graded" in helps["submissions"] and "assignment" in helps["assignment"]
    assert "interpreter" in helps["backend"]
    assert "ray" in {a.dest: a.help for a in commands["batch"]._actions}["executor"]
    assert "at a time" in {a.dest: a.help for a in commands["selftest"]._actions}["jobs"]
    assert "torch" in {a.dest: a.help for a in commands["gradescope-bundle"]._actions}["torch_version"]


def test_unknown_assignment_leaves_no_output_folder(tmp_path: Path, repo_root: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    submission = tmp_path / "fused_layers.py"
    submission.write_text("", encoding="utf-8")
    out = tmp_path / "out" / "nested"
    code = main(["--assignments", str(repo_root / "assignments"), "grade", str(submission),
                 "--assignment", "nosuch", "--out", str(out)])
    assert code == 2
    assert "no assignment 'nosuch'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_classroom_workflow_without_a_repository_is_a_usage_error(tmp_path: Path, repo_root: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli, "installed_from_github", lambda: None)
    out = tmp_path / "classroom.yml"
    code = main(["--assignments", str(repo_root / "assignments"), "classroom-workflow", "--assignment", "softmax",
                 "--out", str(out)])
    assert code == 2
    assert "needs --grader-repo OWNER/NAME" in capsys.readouterr().err
    assert not out.exists()


def test_classroom_workflow_installs_from_where_the_grader_came_from(tmp_path: Path, repo_root: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "installed_from_github", lambda: "cs-dept/kernel-grader-public")
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
