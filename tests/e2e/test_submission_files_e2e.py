"""Files as students submit them, through the real CLI: a file that is not Python source gets one clear line
and complete results (fast: nothing runs), a renamed copy is graded as its assignment with a note, and a
missing assignments folder says so. The two grading runs on the interpreter are marked slow."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grader.authoring.discovery import assignment_for_submission, assignments_fitting
from grader.authoring.spec import load_assignment
from grader.cli import main
from grader.running.aot import compiled_kernels
from tests.conftest import ASSIGNMENT, SEED, copy_course, read_results

PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108000000003a7e9b55"
                    "0000000a49444154789c63600000000200015e2f8a0d0000000049454e44ae426082")


def grade(repo_root: Path, submission: Path, out: Path, *extra: str) -> int:
    return main(["--assignments", str(repo_root / "assignments"), "grade", str(submission), "--assignment",
                 ASSIGNMENT, "--out", str(out), "--seed", str(SEED), "--backend", "interpreter", *extra])


@pytest.mark.parametrize(("name", "data", "reason"), [
    ("fused_layers.py", PNG, "fused_layers.py is not a Python source file: it starts with the bytes of a PNG image."),
    ("fused_layers.py", b"import triton\n\x00\x00\x00", "fused_layers.py is not a Python source file: it holds NUL"),
    ("fused_layers.py", "x = 'caf\u00e9'\n".encode("latin-1"), "fused_layers.py is not a Python source file: it "
                                                               "is not text in UTF-8"),
    ("fused_layers.ipynb", b"{ not json", "fused_layers.ipynb is not a readable notebook (invalid JSON"),
    ("fused_layers.ipynb", b'{"nbformat": 3, "worksheets": []}', "fused_layers.ipynb is not an nbformat 4"),
    ("fused_layers.ipynb", PNG, "fused_layers.ipynb is not a notebook: it starts with the bytes of a PNG image."),
])
def test_a_file_that_is_not_source_gets_one_line_and_complete_results(
        repo_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, data: bytes,
        reason: str) -> None:
    submission = tmp_path / name
    submission.write_bytes(data)
    assert grade(repo_root, submission, tmp_path / "out") == 0  # graded: 0, and the results say why
    printed = capsys.readouterr().out
    assert printed.count(reason) == 1 and "not-python-source" in printed
    results = read_results(tmp_path / "out" / "results.json")
    spec = load_assignment(repo_root / "assignments" / ASSIGNMENT / "assignment.toml")
    checks = [f"gpu-compile-{kernel.name}" for kernel, _ in compiled_kernels(spec)]  # as in any interpreter grade
    assert [t["extra_data"]["case_id"] for t in results["tests"]] == [c.id for c in spec.cases] + checks
    assert results["score"] == 0 and all(t["score"] == 0 for t in results["tests"])
    assert len({t["output"] for t in results["tests"]}) == 1  # one reason, the same for every case
    assert all(t["output"].startswith(reason) and t["tags"] == ["not-python-source"] for t in results["tests"])
    assert "SyntaxError" not in json.dumps(results) and "null bytes" not in json.dumps(results)
    assert reason.replace("_", "\\_") in results["output"]  # the student view says it (Markdown-escaped)
    graded = json.loads((tmp_path / "out" / "grade.json").read_text(encoding="utf-8"))
    assert graded["rejected"].startswith(reason) and graded["max_score"] == spec.max_score


def test_check_prints_it_plainly(repo_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    submission = tmp_path / "fused_layers.py"
    submission.write_bytes(PNG)
    assert main(["--assignments", str(repo_root / "assignments"), "check", str(submission), "--seed", "1"]) == 1
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert lines[0].startswith("fused_layers.py (fused_layers): 0 / 6  (")
    line = "fused_layers.py is not a Python source file: it starts with the bytes of a PNG image."
    assert printed.count(line) == 1 and "FAIL" not in printed and "Nothing in it ran" in printed


@pytest.mark.parametrize("name", ["Copy of fused_layers.py", "fused_layers (1).py", "fused_layers_final.py",
                                  "fused_layers-2.py", "Copy of fused_layers.ipynb"])
def test_a_renamed_file_resolves_to_its_assignment(repo_root: Path, tmp_path: Path, name: str) -> None:
    submission = tmp_path / name
    submission.write_text("", encoding="utf-8")
    found = assignment_for_submission(submission, repo_root / "assignments")
    assert found is not None and found.id == ASSIGNMENT
    softmax = tmp_path / "softmax_final.ipynb"
    softmax.write_text("{}", encoding="utf-8")
    other = assignment_for_submission(softmax, repo_root / "assignments")
    assert other is not None and other.id == "softmax"


def test_an_exact_name_wins_over_a_renamed_one(repo_root: Path, tmp_path: Path) -> None:
    course = tmp_path / "course"
    copy_course("softmax", course)
    lab = course / "assignments" / "softmax_2"  # an assignment whose file is softmax_2.py
    shutil.copytree(course / "assignments" / "softmax", lab)
    spec = lab / "assignment.toml"
    spec.write_text(spec.read_text(encoding="utf-8").replace('id = "softmax"', 'id = "softmax_2"')
                    .replace('submission_file = "softmax.py"', 'submission_file = "softmax_2.py"'), encoding="utf-8")
    own = tmp_path / "softmax_2.py"
    own.write_text("", encoding="utf-8")
    assert [a.id for a in assignments_fitting(own, course / "assignments")] == ["softmax_2"]
    both = tmp_path / "softmax_2 (1).py"  # a renamed softmax_2.py, or (peeled twice) softmax.py
    both.write_text("", encoding="utf-8")
    assert [a.id for a in assignments_fitting(both, course / "assignments")] == ["softmax", "softmax_2"]
    assert assignment_for_submission(both, course / "assignments") is None


def test_check_names_the_problem_with_the_name(repo_root: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    submission = tmp_path / "my_kernels.py"
    submission.write_text("", encoding="utf-8")
    assert main(["--assignments", str(repo_root / "assignments"), "check", str(submission)]) == 2
    err = capsys.readouterr().err
    assert "cannot tell the assignment from the file name my_kernels.py: it fits no assignment's file " \
           "(attention: attention.py, fused_layers: fused_layers.py, softmax: softmax.py); pass --assignment ID" in err


@pytest.mark.parametrize("command", [["check", "{sub}"], ["list"], ["grade", "{sub}", "--assignment", "softmax",
                                                                     "--out", "{out}"]])
def test_a_missing_assignments_folder_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              command: list[str]) -> None:
    submission = tmp_path / "softmax.py"
    submission.write_text("", encoding="utf-8")
    missing = tmp_path / "no-such-course" / "assignments"
    argv = [a.format(sub=submission, out=tmp_path / "out") for a in command]
    assert main(["--assignments", str(missing), *argv]) == 2
    err = capsys.readouterr().err
    assert f"no assignments folder at {missing}" in err and "cannot tell" not in err and "known: )" not in err


# ------------------------------------------------------------------------------------ slow: grading


@pytest.mark.slow
def test_a_renamed_copy_is_graded_and_noted(repo_root: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    template = (repo_root / "student_template" / "softmax" / "softmax.py").read_text(encoding="utf-8")
    submission = tmp_path / "softmax (1).py"
    submission.write_text(template, encoding="utf-8")
    code = main(["--assignments", str(repo_root / "assignments"), "check", str(submission), "--seed", "1",
                 "--backend", "interpreter", "--out", str(tmp_path / "out")])
    printed = capsys.readouterr().out
    assert code == 1 and printed.startswith("softmax (1).py (softmax): 0 / 5  (")  # the file as submitted
    assert "note: softmax (1).py was graded as softmax.py: its name looks like a renamed copy" in printed
    # the worker imported the student's own file: its frames carry the student's file name
    assert "(softmax (1).py, line " in printed and "TODO: softmax" in printed
    graded = json.loads((tmp_path / "out" / "grade.json").read_text(encoding="utf-8"))
    assert graded["submission"] == "softmax (1).py" and graded["notes"][0].startswith("softmax (1).py was graded")


@pytest.mark.slow
def test_copy_of_the_reference_gets_full_marks(repo_root: Path, tmp_path: Path) -> None:
    submission = tmp_path / "Copy of fused_layers.py"
    shutil.copyfile(repo_root / "reference" / "fused_layers" / "reference.py", submission)
    assert grade(repo_root, submission, tmp_path / "out") == 0
    results = read_results(tmp_path / "out" / "results.json")
    assert results["score"] == results["extra_data"]["max_score"] == 40
    assert results["extra_data"]["notes"][0].startswith("Copy of fused_layers.py was graded as fused_layers.py")
