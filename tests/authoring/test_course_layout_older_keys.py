"""Specs written from older docs keep loading (grader/authoring/course_layout.py): `[assignment] reference`,
whose meaning (the reference solution's file) the course layout now fixes, loads with a one-line note when it
names that file, and fails only when it names another one."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.authoring.spec import SpecError, load_assignment
from grader.cli import main
from tests.authoring.test_public import spec_path
from tests.authoring.test_spec import VALID
from tests.conftest import ROOT, copy_course


def course_spec(course: Path, reference: str | None) -> Path:
    """VALID as course/assignments/tiny/assignment.toml, with `reference = ...` in [assignment] when given."""
    folder = course / "assignments" / "tiny"
    folder.mkdir(parents=True)
    (folder / "oracles.py").write_text("PROBLEMS = {}\n", encoding="utf-8")
    (course / "reference" / "tiny").mkdir(parents=True)
    (course / "reference" / "tiny" / "reference.py").write_text("# the reference\n", encoding="utf-8")
    text = VALID if reference is None else VALID.replace(
        'submission_file = "tiny.py"\n', f'submission_file = "tiny.py"\nreference = "{reference}"\n')
    (folder / "assignment.toml").write_text(text, encoding="utf-8")
    return folder / "assignment.toml"


@pytest.mark.parametrize("value", ["reference.py", "../../reference/tiny/reference.py",
                                   "reference/tiny/reference.py"])
def test_a_reference_key_naming_the_layouts_file_loads_with_a_note(tmp_path: Path, value: str) -> None:
    spec = course_spec(tmp_path, value)
    assignment = load_assignment(spec)
    assert assignment.reference_solution == (tmp_path / "reference" / "tiny" / "reference.py").resolve()
    (note,) = assignment.load_notes
    assert "\n" not in note and str(spec.resolve()) in note
    assert f"reference = {value!r}" in note and "remove the key" in note and "reference/tiny/reference.py" in note


def test_no_key_and_an_empty_key_load_without_a_note(tmp_path: Path) -> None:
    assert load_assignment(course_spec(tmp_path / "a", None)).load_notes == ()
    assert load_assignment(course_spec(tmp_path / "b", "")).load_notes == ()


@pytest.mark.parametrize("value", ["solution.py", "../../reference/tiny/solution.py", "../other/reference.py"])
def test_a_reference_key_naming_another_file_is_a_contradiction(tmp_path: Path, value: str) -> None:
    with pytest.raises(SpecError) as info:
        load_assignment(course_spec(tmp_path, value))
    assert info.value.key == "assignment.reference"
    assert f"names {value!r}" in str(info.value) and "reference/tiny/reference.py" in str(info.value)


def test_the_key_loads_where_the_course_has_no_reference_folder(tmp_path: Path) -> None:
    """The Gradescope bundle ships the spec without reference/: the key still means the same and loads."""
    spec = course_spec(tmp_path, "reference.py")
    (tmp_path / "reference" / "tiny" / "reference.py").unlink()
    (tmp_path / "reference" / "tiny").rmdir()
    assert load_assignment(spec).reference_dir is None and len(load_assignment(spec).load_notes) == 1


def test_the_command_line_prints_the_note_once_and_works(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A real course assignment (softmax, copied) written with the older key: listed, its mutants listed,
    each command printing the note once on stderr."""
    spec = copy_course("softmax", tmp_path) / "assignment.toml"
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace("[assignment]\n", '[assignment]\nreference = "reference.py"\n', 1), encoding="utf-8")
    root = str(tmp_path / "assignments")
    assert main(["--assignments", root, "list"]) == 0
    out, err = capsys.readouterr()
    assert "softmax:" in out
    assert err.count("grader: note: ") == 1 and "reference = 'reference.py' is no longer needed" in err
    assert main(["--assignments", root, "mutant", "--assignment", "softmax", "--list"]) == 0
    assert capsys.readouterr().err.count("remove the key") == 1


def test_an_old_spec_naming_its_reference_loads_with_a_note(tmp_path: Path) -> None:
    folder = tmp_path / "assignments" / "softmax"
    folder.mkdir(parents=True)
    text = spec_path("softmax").read_text(encoding="utf-8")
    (folder / "assignment.toml").write_text(text.replace('module = "oracles.py"',
                                                         'module = "oracles.py"\nreference = "reference.py"'))
    (folder / "oracles.py").write_text((ROOT / "assignments/softmax/oracles.py").read_text(encoding="utf-8"))
    # its meaning is the layout's (reference/softmax/reference.py): it loads, with a note to remove the key
    (note,) = load_assignment(folder / "assignment.toml").load_notes
    assert "reference = 'reference.py' is no longer needed" in note and "reference/softmax/reference.py" in note
    # naming another file contradicts the layout
    (folder / "assignment.toml").write_text(text.replace('module = "oracles.py"',
                                                         'module = "oracles.py"\nreference = "solution.py"'))
    with pytest.raises(SpecError) as caught:
        load_assignment(folder / "assignment.toml")
    assert "[assignment.reference] names 'solution.py'" in str(caught.value)
    assert "reference/softmax/reference.py" in str(caught.value)
    # a student bundle written before the layout said "no reference" with an empty one: still loads
    (folder / "assignment.toml").write_text(text.replace('module = "oracles.py"',
                                                         'module = "oracles.py"\nreference = ""'))
    assert load_assignment(folder / "assignment.toml").reference_solution is None
