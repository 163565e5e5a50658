"""Every assignment folder validates as a whole; each validation rule rejects a broken copy with a
message that names the file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.authoring.discovery import list_assignment_ids, load_validated
from grader.authoring.spec import SpecError
from grader.authoring.validation import InvalidAssignment
from tests.conftest import copy_course

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENTS = list_assignment_ids(ROOT / "assignments")


def test_the_checkout_ships_assignments() -> None:
    assert {"fused_layers", "softmax"} <= set(ASSIGNMENTS)


@pytest.mark.parametrize("assignment_id", ASSIGNMENTS)
def test_assignment_folder_validates(assignment_id: str) -> None:
    assignment = load_validated(ROOT / "assignments" / assignment_id / "assignment.toml")
    assert assignment.id == assignment_id


@pytest.fixture
def softmax_copy(tmp_path: Path) -> Path:
    return copy_course("softmax", tmp_path)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) >= 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")


def problems_of(folder: Path) -> str:
    # the oracle module is loaded once per path: a fresh tmp folder gets a fresh module
    with pytest.raises(SpecError) as caught:
        load_validated(folder / "assignment.toml")
    return str(caught.value)


def test_trap_text_without_a_trap_function(softmax_copy: Path) -> None:
    edit(softmax_copy / "assignment.toml", "[traps.wrong-axis]", "[traps.wrong-axiss]")
    message = problems_of(softmax_copy)
    assert "[traps.wrong-axiss]" in message and "can never be named" in message
    assert "oracles.py: [PROBLEMS[" in message and "traps['wrong-axis']" in message and "bare id" in message


def test_exposes_names_an_unknown_trap(softmax_copy: Path) -> None:
    edit(softmax_copy / "assignment.toml", 'exposes = ["wrong-axis"]', 'exposes = ["wrong-axes"]')
    message = problems_of(softmax_copy)
    assert "assignment.toml" in message and ".exposes]" in message and "'wrong-axes'" in message


def test_a_case_without_a_tolerance_on_one_backend(softmax_copy: Path) -> None:
    edit(softmax_copy / "assignment.toml", "[tolerances.softmax.interpreter.float32]",
         "[tolerances.softmax.interpreter.float16]")
    message = problems_of(softmax_copy)
    assert "[tolerances.softmax.interpreter.float32] is missing" in message


def test_an_undescribed_input_kind(softmax_copy: Path) -> None:
    edit(softmax_copy / "assignment.toml", 'rising = "logits rising', 'risingg = "logits rising')
    message = problems_of(softmax_copy)
    assert "'rising' is not described" in message and "[input_kinds]" in message


def test_a_redefined_generic_trap(softmax_copy: Path) -> None:
    edit(softmax_copy / "assignment.toml", "[traps.wrong-axis]", "[traps.timeout]")
    message = problems_of(softmax_copy)
    assert "[traps.timeout]" in message and "generic" in message


def test_a_trap_no_mutant_proves(softmax_copy: Path) -> None:
    toml = softmax_copy.parent.parent / "reference" / "softmax" / "mutants.toml"
    text = toml.read_text(encoding="utf-8")
    assert '"no-max-subtraction"' in text
    toml.write_text(text.replace('"no-max-subtraction"', '"oob-read"'), encoding="utf-8")
    message = problems_of(softmax_copy)
    assert "[traps.no-max-subtraction] no mutant proves it" in message


def test_every_problem_is_listed_at_once(softmax_copy: Path) -> None:
    edit(softmax_copy / "assignment.toml", 'rising = "logits rising', 'risingg = "logits rising')
    edit(softmax_copy / "assignment.toml", "[tolerances.softmax.interpreter.float32]",
         "[tolerances.softmax.interpreter.float16]")
    with pytest.raises(InvalidAssignment) as caught:
        load_validated(softmax_copy / "assignment.toml")
    assert len(caught.value.problems) >= 2
    assert str(caught.value).startswith(f"{len(caught.value.problems)} problems in the assignment:")
