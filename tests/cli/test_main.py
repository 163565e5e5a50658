"""grader/cli/main.py: a user's mistake is one line on stderr and exit code 2, and leaves nothing behind; every
subcommand the parser knows has its command."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from grader.cli import build_parser, main
from grader.cli.main import COMMANDS


def test_every_subcommand_has_its_command() -> None:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(sub.choices) == set(COMMANDS)


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
