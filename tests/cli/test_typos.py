"""grader/cli/typos.py: a mistyped option is answered by the subcommand it was given to, with that subcommand's
usage and the nearest option; an unknown subcommand or choice with the nearest choice; exit code 2 as argparse."""

from __future__ import annotations

import pytest

from grader.cli.typos import CommandParser, did_you_mean, nearest, option_typos


def _parser() -> CommandParser:
    parser = CommandParser(prog="tool")
    parser.add_argument("--assignments")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check = sub.add_parser("check", help="check a file")
    check.add_argument("submission")
    check.add_argument("--assignment")
    check.add_argument("--backend", choices=("auto", "interpreter", "cuda"), default="auto")
    check.add_argument("--calibration-max-age", type=float)
    grade = sub.add_parser("grade", help="grade files")
    grade.add_argument("--assignment", required=True)
    return parser


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err


def test_nearest_and_its_sentence() -> None:
    assert nearest("--assignement", ["--assignment", "--assignments", "--out"]) == "--assignment"
    assert nearest("chekc", ["grade", "check", "batch"]) == "check"
    assert nearest("--zzz", ["--assignment", "--out"]) is None
    assert did_you_mean([]) == ""
    assert did_you_mean([("--assignement", "--assignment")], "unrecognized arguments: --assignement x.py") == (
        "did you mean --assignment?")
    # a message that does not name the typo (a required option missing): the suggestion names it
    assert did_you_mean([("--assignement", "--assignment")], "required: --assignment") == (
        "did you mean --assignment (for --assignement)?")
    assert did_you_mean([("--assignement", "--assignment"), ("--taget", "--target")]) == (
        "did you mean --assignment (for --assignement), --target (for --taget)?")


def test_option_typos_skip_values_prefixes_and_what_follows_a_double_dash() -> None:
    known = ["-h", "--help", "--assignment", "--seed", "--out"]
    tokens = ["x.py", "--assignement=softmax", "--seed", "-1", "--ou", "-", "--", "--sede"]
    assert option_typos(tokens, known) == [("--assignement", "--assignment")]


def test_a_misspelt_option_shows_the_subcommands_usage_and_the_nearest_option(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(["check", "--assignement", "softmax", "x.py"], capsys)
    assert err.startswith("usage: tool check ")  # the subcommand's usage, not the list of subcommands
    assert "COMMAND" not in err
    assert err.rstrip().endswith("tool check: error: unrecognized arguments: --assignement x.py; "
                                 "did you mean --assignment?")


def test_a_misspelt_required_option_is_named_with_the_missing_one(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(["grade", "--assignement", "softmax"], capsys)
    assert err.startswith("usage: tool grade ")
    assert "the following arguments are required: --assignment; did you mean --assignment (for --assignement)?" in err


def test_a_misspelt_subcommand_or_choice_gets_the_nearest_choice(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(["chekc"], capsys)
    assert err.startswith("usage: tool ")
    assert "invalid choice: 'chekc'; did you mean 'check'? (choose from 'check', 'grade')" in err
    err = _error(["check", "x.py", "--backend", "cdua"], capsys)
    assert err.startswith("usage: tool check ")
    assert "argument --backend: invalid choice: 'cdua'; did you mean 'cuda'?" in err
    err = _error(["frobnicate"], capsys)
    assert "invalid choice: 'frobnicate' (choose from 'check', 'grade')" in err and "did you mean" not in err


def test_a_misspelt_top_level_option_is_suggested_from_the_top_level(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(["--assignmets", "dir", "check", "x.py", "--out-dir", "o"], capsys)
    assert "invalid choice: 'dir' (choose from 'check', 'grade'); did you mean --assignments (for --assignmets)?" in err
    assert "--out-dir" not in err.split("error:")[1]  # the subcommand's tokens are not the top level's to judge


def test_what_parses_still_parses() -> None:
    args = _parser().parse_args(["--assignments", "a", "check", "x.py", "--assignment", "softmax",
                                 "--calibration-max-age", "-1"])
    assert (args.assignments, args.command, args.submission, args.assignment) == ("a", "check", "x.py", "softmax")
    assert args.calibration_max_age == -1.0
