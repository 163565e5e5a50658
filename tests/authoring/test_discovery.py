"""Finding assignments (grader/authoring/discovery.py): the assignments root from the option, the
environment or the checkout; listing; loading validated, the mutant corpus checked at load (a stale
patch fails there, naming mutants.toml and the mutant); which assignment a file's name fits."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.authoring.discovery import (
    AssignmentNotFound,
    NoAssignmentsFolder,
    assignment_for_submission,
    assignments_root,
    checked_corpus,
    find_assignment,
    list_assignment_ids,
    load_validated,
    proven_traps,
)
from grader.authoring.spec import SpecError
from tests.conftest import ROOT, copy_course


def test_assignments_root_option_environment_and_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRADER_ASSIGNMENTS", raising=False)
    assert assignments_root() == ROOT / "assignments"
    monkeypatch.setenv("GRADER_ASSIGNMENTS", str(tmp_path))
    assert assignments_root() == tmp_path.resolve()
    assert assignments_root(ROOT) == ROOT.resolve()  # the option wins


def test_list_and_find(tmp_path: Path) -> None:
    assert list_assignment_ids(ROOT / "assignments") == ["attention", "fused_layers", "softmax"]
    assert list_assignment_ids(tmp_path / "absent") == []
    with pytest.raises(AssignmentNotFound, match=r"no assignment 'nope' .*known: attention, fused_layers, softmax"):
        find_assignment("nope", ROOT / "assignments")
    with pytest.raises(NoAssignmentsFolder, match="no assignments folder at"):
        find_assignment("softmax", tmp_path / "absent")


def test_public_form_has_no_corpus_to_check() -> None:
    public = find_assignment("softmax", ROOT / "assignments", public=True)
    assert public.public and public.reference_dir is None
    assert checked_corpus(public) is None and proven_traps(public) is None


def test_the_corpus_is_checked_when_the_assignment_loads(tmp_path: Path) -> None:
    spec = copy_course("softmax", tmp_path) / "assignment.toml"
    assignment = load_validated(spec)
    corpus = checked_corpus(assignment)
    assert corpus is not None and {"no_max_subtraction", "correct_exp2"} <= {m.id for m in corpus}
    reference = tmp_path / "reference" / "softmax" / "reference.py"
    # the reference moves under a patch: loading fails, before any selftest, naming the mutant
    (patch,) = [m for m in corpus if m.id == "no_max_subtraction"]
    text = reference.read_text(encoding="utf-8")
    find = patch.edits[0].find
    reference.write_text(text.replace(find, find.replace(" ", "  ")), encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        load_validated(spec)
    assert caught.value.path == tmp_path / "reference" / "softmax" / "mutants.toml"
    assert caught.value.key.startswith("mutant ") and "occurs 0 times" in str(caught.value)


def test_the_assignment_a_file_name_fits(tmp_path: Path) -> None:
    root = ROOT / "assignments"
    assert assignment_for_submission(Path("softmax.py"), root).id == "softmax"
    assert assignment_for_submission(Path("Copy of fused_layers.py"), root).id == "fused_layers"
    assert assignment_for_submission(Path("notes.txt"), root) is None
