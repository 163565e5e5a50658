"""Gradescope gets the same test list for every submission of an assignment: a file that does not import, one
that defines nothing, one that is not Python at all and the untouched template have the same tests, in the same
order (the compile checks included), so Gradescope's statistics per question hold. The same grades show the
feedback texts a new user found wanting: the untouched template's `pass` bodies, the empty file."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import pytest

from grader.cli import main
from tests.conftest import ROOT, read_results

SUBMISSIONS = {
    "template": (ROOT / "student_template" / "softmax" / "softmax.py").read_bytes(),
    "syntax_error": b"import triton\n\ndef softmax(x:\n    return x\n",
    "empty": b"# TODO: everything\n",
    "picture": b"\x89PNG\r\n\x1a\n" + bytes(64),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Each submission graded by `grader grade` (softmax, interpreter, one run for all), its results.json and
    report.md by name."""
    folder = tmp_path_factory.mktemp("softmax-class")
    paths = []
    for name, data in SUBMISSIONS.items():
        (folder / name).mkdir()
        path = folder / name / "softmax.py"
        path.write_bytes(data)
        paths.append(path)
    out: dict[str, dict[str, Any]] = {}
    for path in paths:
        target = folder / "out" / path.parent.name
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["--assignments", str(ROOT / "assignments"), "grade", str(path), "--assignment", "softmax",
                         "--out", str(target), "--seed", "3", "--backend", "interpreter"]) == 0
        out[path.parent.name] = {"results": read_results(target / "results.json"),
                                 "md": (target / "report.md").read_text(encoding="utf-8")}
    return out


def test_every_submission_gets_the_same_tests_in_the_same_order(graded: dict[str, dict[str, Any]]) -> None:
    names = {name: [t["name"] for t in g["results"]["tests"]] for name, g in graded.items()}
    reference = names["template"]
    assert [n for n in reference if "compiles for the grading GPU" in n] == [
        "softmax_kernel: compiles for the grading GPU (sm_90)", "online_softmax_kernel: compiles for the grading GPU "
        "(sm_90)"]
    for name, tests in names.items():
        assert tests == reference, name
        assert [t["number"] for t in graded[name]["results"]["tests"]] == [str(i + 1) for i in range(len(tests))]


def test_a_check_that_could_not_run_says_why(graded: dict[str, dict[str, Any]]) -> None:
    for name, words in (("syntax_error", "does not import"), ("empty", "does not define `softmax_kernel`"),
                        ("picture", "is not a Python source file")):
        (check,) = [t for t in graded[name]["results"]["tests"] if t["name"].startswith("softmax_kernel: compiles")]
        assert check["status"] == "failed" and check["max_score"] == 0 and words in check["output"], (name, check)


def test_a_pass_body_is_not_a_passed_case(graded: dict[str, dict[str, Any]]) -> None:
    """The template's kernels compile (their bodies are `pass`): the check says so, worth nothing, and the
    tables count the kernel's cases only."""
    results, md = graded["template"]["results"], graded["template"]["md"]
    (check,) = [t for t in results["tests"] if t["name"].startswith("online_softmax_kernel: compiles")]
    assert check["status"] == "passed" and check["max_score"] == 0 and "worth no points" in check["output"]
    assert "| `online_softmax_kernel` | kernel | 0 / 8 | 0 / 10 |" in md  # 8 cases: the compile check is no case
    assert "| `online_softmax_kernel` | kernel | 0 / 1 | 0 / 1 |" in results["output"]  # the student's: 1 public
    assert "online\\_softmax\\_kernel: compiles for the grading GPU (sm\\_90)** (a check, no points)" in md


def test_the_untouched_template_is_told_to_fill_in_its_todo(graded: dict[str, dict[str, Any]]) -> None:
    md = graded["template"]["md"]
    card = md.split("### Output elements never written")[1].split("\n### ")[0]
    assert "Fill in the TODO in the kernel's body" in card
    assert "grid covers" not in card and "multiples of the block size" not in card


def test_the_score_line_says_points_once_and_cases_once(graded: dict[str, dict[str, Any]]) -> None:
    output = graded["template"]["results"]["output"]  # the student view: public cases only
    line = next(line for line in output.splitlines() if line.startswith("**"))
    assert line == "**Public cases: 0 / 5 points** · 0 of 4 cases passed", line


def test_an_empty_file_is_told_it_is_empty_and_what_to_define(graded: dict[str, dict[str, Any]]) -> None:
    notes = graded["empty"]["results"]["extra_data"]["notes"]
    assert notes[0].startswith("softmax.py is empty: it defines nothing. It must define `softmax_kernel`, "
                               "`online_softmax_kernel` and `softmax`")
    assert "softmax.py is empty" in graded["empty"]["md"]
    assert not any("is empty" in n for n in graded["syntax_error"]["results"]["extra_data"]["notes"])
