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


def test_every_subcommand_has_a_one_line_summary_in_grader_help(capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # a default terminal
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    commands = _subcommands(build_parser())
    for name in commands:
        (line,) = [i for i, text in enumerate(lines) if text.split()[:1] == [name]]
        summary = lines[line].split(maxsplit=1)[1]
        assert summary.strip(), name
        # one line: the next line is another subcommand (or the end), never a continuation of this summary
        following = lines[line + 1].split()[:1] if line + 1 < len(lines) else []
        assert not following or following[0] in commands, (name, lines[line + 1])
        assert len(lines[line]) <= 80
    # each subcommand's own --help opens with a sentence of what it does
    for name, command in commands.items():
        assert command.description and command.description.endswith("."), name


def test_seed_help_speaks_to_its_reader() -> None:
    commands = _subcommands(build_parser())

    def seed_help(name: str) -> str:
        return {a.dest: a.help for a in commands[name]._actions}["seed"] or ""

    # a student checking never has the course's seed: check's help does not send them to it
    assert "course-seed.toml" not in seed_help("check") and "course's seed" not in seed_help("check")
    assert "the assignment's public seed" in seed_help("check")
    for name in ("grade", "batch"):
        assert "reference/course-seed.toml" in seed_help(name), name
    assert "course" not in seed_help("selftest") and "new one each run" in seed_help("selftest")


def test_a_misspelt_option_of_check_gets_checks_usage_and_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["check", "--assignement", "softmax", "x.py"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: grader check [-h] [--assignment ASSIGNMENT]")
    assert "selftest" not in err  # not the top-level list of subcommands
    assert err.rstrip().endswith("grader check: error: unrecognized arguments: --assignement x.py; "
                                 "did you mean --assignment?")


def test_a_misspelt_subcommand_gets_the_nearest_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["chekc", "x.py"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: grader ") and "invalid choice: 'chekc'; did you mean 'check'?" in err


def test_check_prints_everything_with_verbose() -> None:
    parser = build_parser()
    assert parser.parse_args(["check", "x.py", "-v"]).verbose is True
    assert parser.parse_args(["check", "x.py", "--verbose"]).verbose is True
    assert parser.parse_args(["check", "x.py"]).verbose is False
