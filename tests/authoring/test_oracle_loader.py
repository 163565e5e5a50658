"""grader/authoring/oracle_loader.py: the oracle module is imported once per path, and its PROBLEMS are
checked against the spec's targets, each error naming the spec and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.authoring.oracle_loader import load_module, load_problems
from grader.authoring.spec import SpecError, load_assignment
from tests.conftest import copy_course


def test_loaded_once_per_path(tmp_path: Path) -> None:
    assignment = load_assignment(copy_course("softmax", tmp_path) / "assignment.toml")
    assert load_module(assignment) is load_module(assignment)
    assert set(load_problems(assignment)) == {"softmax"}


@pytest.mark.parametrize(("old", "new", "key", "problem"), [
    ("PROBLEMS = {", "NOT_PROBLEMS = {", "assignment.module", "defines no PROBLEMS dict"),
    ('"softmax": Problem(', '"other": Problem(', "softmax_kernel.problem", "'softmax' is not in oracles.py's PROBLEMS"),
])
def test_problems_checked_against_the_spec(tmp_path: Path, old: str, new: str, key: str, problem: str) -> None:
    folder = copy_course("softmax", tmp_path / "c")
    oracles = folder / "oracles.py"
    text = oracles.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    oracles.write_text(text.replace(old, new), encoding="utf-8")
    assignment = load_assignment(folder / "assignment.toml")
    with pytest.raises(SpecError) as caught:
        load_problems(assignment)
    assert caught.value.key == key and problem in caught.value.problem
