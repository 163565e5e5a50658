"""grader/cli/parser.py, as a new user meets it: `--version`, help text on every option; the calibration options
as one settings value."""

from __future__ import annotations

import argparse
import importlib.metadata
from pathlib import Path

import pytest

from grader.cli import build_parser, main
from grader.cli.parser import calibration_settings
from grader.operations.requests import UsageError


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


def test_the_calibration_options_are_one_settings_value(tmp_path: Path) -> None:
    args = build_parser().parse_args(["grade", "s.py", "--assignment", "softmax", "--out", "o",
                                      "--calibration-dir", str(tmp_path), "--calibration-max-age", "2",
                                      "--recalibrate"])
    settings = calibration_settings(args)
    assert (settings.folder, settings.max_age_s, settings.recalibrate) == (tmp_path, 7200.0, True)
    assert settings.store().not_before > 0  # --recalibrate: bars measured before now are not used
    negative = build_parser().parse_args(["check", "s.py", "--calibration-max-age", "-1"])
    with pytest.raises(UsageError, match="must not be negative"):
        calibration_settings(negative)
