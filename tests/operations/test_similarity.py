"""grader/operations/similarity.py: `grader similarity FOLDER --assignment A --out DIR` on a planted class, in any
layout `grader batch` reads; the template and `--allowed` sources discounted; a missing --allowed refused."""

from __future__ import annotations

import contextlib
import csv
import io
from pathlib import Path

import pytest

from grader.authoring.spec import load_assignment
from grader.cli import main
from grader.operations.similarity import discounted_sources
from tests.judging.planted import planted_class


def run(repo_root: Path, *args: str) -> tuple[int, str]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["--assignments", str(repo_root / "assignments"), "similarity", *args])
    return code, printed.getvalue()


def test_the_command_ranks_a_folder_of_students(tmp_path: Path, repo_root: Path) -> None:
    for name, text in planted_class().items():
        (tmp_path / "class" / name).mkdir(parents=True)
        (tmp_path / "class" / name / "softmax.py").write_text(text, encoding="utf-8")  # one folder per student
    code, printed = run(repo_root, str(tmp_path / "class"), "--assignment", "softmax", "--out", str(tmp_path / "o"))
    assert code == 0, printed
    assert "6 submissions" in printed and "2 flagged" in printed
    top = printed.splitlines()[1:3]
    assert {frozenset(line.split()[1:3]) for line in top} == {frozenset({"bob", "eve"}), frozenset({"cat", "fay"})}
    rows = list(csv.DictReader(io.StringIO((tmp_path / "o" / "similarity.csv").read_text(encoding="utf-8"))))
    assert sum(r["flagged"] == "yes" for r in rows) == 2
    assert "student_template/softmax/softmax.py" in (tmp_path / "o" / "similarity.html").read_text(encoding="utf-8")


def test_a_file_three_students_handed_in_is_flagged(tmp_path: Path, repo_root: Path) -> None:
    """A class of six, three of them one file, the other three sharing most of its code (fused_layers' reference
    and correct variants: edits of one another): every pair of the three is flagged at 1.0, identical."""
    folder = repo_root / "reference" / "fused_layers"
    (tmp_path / "class").mkdir()
    for name, path in (("ann", folder / "reference.py"), ("bob", folder / "variants" / "correct_autotune.py"),
                       ("cat", folder / "variants" / "correct_chunked_two_pass.py"),
                       *((n, folder / "variants" / "correct_welford.py") for n in ("dan", "eve", "fay"))):
        (tmp_path / "class" / f"{name}.py").write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    code, printed = run(repo_root, str(tmp_path / "class"), "--assignment", "fused_layers", "--out",
                        str(tmp_path / "o"))
    assert code == 0 and "6 submissions" in printed, printed
    rows = list(csv.DictReader(io.StringIO((tmp_path / "o" / "similarity.csv").read_text(encoding="utf-8"))))
    assert [(r["a"], r["b"], r["score"], r["flagged"], r["match"]) for r in rows[:3]] == [
        ("dan", "eve", "1.0000", "yes", "identical"), ("dan", "fay", "1.0000", "yes", "identical"),
        ("eve", "fay", "1.0000", "yes", "identical")]


def test_allowed_sources_are_discounted(tmp_path: Path, repo_root: Path) -> None:
    """Two students who both pasted the course's tutorial kernel: flagged, unless the tutorial is allowed."""
    texts = planted_class()
    tutorial = texts["dan"]  # stands for code the course hands out
    (tmp_path / "class").mkdir()
    for name in ("ann", "dan"):
        (tmp_path / "class" / f"{name}.py").write_text(texts[name], encoding="utf-8")
    (tmp_path / "class" / "gil.py").write_text(tutorial, encoding="utf-8")
    (tmp_path / "tutorial.py").write_text(tutorial, encoding="utf-8")
    folder, out = str(tmp_path / "class"), str(tmp_path / "o")
    assert "1 flagged" in run(repo_root, folder, "--assignment", "softmax", "--out", out)[1]
    code, printed = run(repo_root, folder, "--assignment", "softmax", "--out", out, "--allowed",
                        str(tmp_path / "tutorial.py"))
    assert code == 0 and "0 flagged" in printed
    assignment = load_assignment(repo_root / "assignments" / "softmax" / "assignment.toml")
    assert set(discounted_sources(assignment, [tmp_path / "tutorial.py"])) == {
        "student_template/softmax/softmax.py", str(tmp_path / "tutorial.py")}


def test_a_missing_allowed_file_is_a_usage_error(tmp_path: Path, repo_root: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "ann.py").write_text("x = 1\n", encoding="utf-8")
    code, _ = run(repo_root, str(tmp_path / "class"), "--assignment", "softmax", "--out", str(tmp_path / "o"),
                  "--allowed", str(tmp_path / "nowhere.py"))
    assert code == 2 and "--allowed" in capsys.readouterr().err and not (tmp_path / "o").exists()
