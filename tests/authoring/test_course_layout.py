"""The course's three folders (grader/authoring/course_layout.py): a spec loads with reference/<id>/ and
student_template/<id>/ as paths, and what an older layout left beside the spec fails to load, saying where
it belongs. An older spec's `[assignment] reference` key is in test_course_layout_older_keys.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.authoring.mutants import load_mutants
from grader.authoring.spec import SpecError, load_assignment
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def fused_layers(repo_root: Path):
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def test_reference_and_mutants_exist(fused_layers, repo_root) -> None:
    assert fused_layers.course_root == repo_root
    assert fused_layers.reference_dir == repo_root / "reference" / "fused_layers"
    assert fused_layers.reference_solution == repo_root / "reference" / "fused_layers" / "reference.py"
    assert fused_layers.template_dir == repo_root / "student_template" / "fused_layers"
    assert load_mutants(fused_layers.reference_dir)


@pytest.mark.parametrize("left_over", ["reference.py", "mutants.toml", "mutants", "variants", "template"])
def test_an_old_layout_left_beside_the_spec_fails_to_load(tmp_path: Path, left_over: str) -> None:
    folder = tmp_path / "assignments" / "softmax"
    folder.mkdir(parents=True)
    for name in ("assignment.toml", "oracles.py"):
        (folder / name).write_bytes((ROOT / "assignments" / "softmax" / name).read_bytes())
    load_assignment(folder / "assignment.toml")
    target = folder / left_over
    target.mkdir() if "." not in left_over else target.write_text("# old layout\n")
    with pytest.raises(SpecError) as caught:
        load_assignment(folder / "assignment.toml")
    home = "student_template" if left_over == "template" else "reference"
    assert str(target) in str(caught.value) and f"move it to {home}/softmax/" in str(caught.value)
