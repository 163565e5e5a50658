"""grader/operations/interactive.py without grading: `check` finds the assignment from the file's name,
always in its public form, and says why when it cannot; an unknown target is refused before any run.
(`check` graded end to end: tests/operations/test_notebook.py, tests/authoring/test_public.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.operations.interactive import CheckError, resolve_assignment, run_check
from tests.conftest import ROOT

ROOT_ASSIGNMENTS = ROOT / "assignments"


def test_the_assignment_from_the_file_name_in_its_public_form() -> None:
    found = resolve_assignment(None, Path("Copy of softmax.py"), ROOT_ASSIGNMENTS)
    assert found.id == "softmax" and found.public and {c.visibility for c in found.cases} == {"public"}
    assert resolve_assignment("fused_layers", Path("anything.py"), ROOT_ASSIGNMENTS).public
    with pytest.raises(CheckError, match=r"fits no assignment's file \(attention: attention.py, "
                                         r"fused_layers: fused_layers.py, softmax"):
        resolve_assignment(None, Path("notes.py"), ROOT_ASSIGNMENTS)


def test_an_unknown_target_is_refused(tmp_path: Path) -> None:
    assignment = resolve_assignment("softmax", Path("softmax.py"), ROOT_ASSIGNMENTS)
    with pytest.raises(CheckError, match=r"no target 'layernorm' in softmax \(known: softmax_kernel"):
        run_check(tmp_path / "softmax.py", assignment, "interpreter", targets=("layernorm",))
