"""The trap catalog an assignment sees (grader/authoring/catalog.py): the grader's generic traps, then the
assignment's own (with those it takes from the course's trap library: test_trap_library.py), none of them
redefining a generic one; a shared trap ships inline in the assignment's public form."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from grader.authoring.catalog import generic_traps, trap_catalog, trap_title
from grader.authoring.public import COURSE_TRAPS, public_toml
from grader.authoring.spec import SpecError, TrapText, load_assignment
from tests.authoring.test_spec import TRAP, VALID, write_spec
from tests.conftest import ROOT


def test_generic_then_assignment_traps() -> None:
    assignment = load_assignment(ROOT / "assignments" / "softmax" / "assignment.toml")
    catalog = trap_catalog(assignment)
    assert set(generic_traps()) <= set(catalog) and set(assignment.traps) <= set(catalog)
    assert list(catalog)[: len(generic_traps())] == list(generic_traps())
    assert trap_title(catalog, "wrong-axis") == assignment.traps["wrong-axis"].title
    assert trap_title(catalog, "no-such-trap") == "no-such-trap"


def test_the_public_form_carries_shared_traps_inline() -> None:
    spec = (ROOT / "assignments" / "fused_layers" / "assignment.toml").read_text(encoding="utf-8")
    written = public_toml(spec, (ROOT / COURSE_TRAPS).read_text(encoding="utf-8"))
    assert "shared_traps" not in written and "[traps.eps-outside-sqrt]" in written


def test_the_catalog_refuses_an_assignment_that_redefines_a_generic_trap(tmp_path: Path) -> None:
    path = write_spec(tmp_path, VALID + TRAP.format(id="own-trap"))
    assignment = load_assignment(path)
    assert "own-trap" in trap_catalog(assignment)
    clash = dataclasses.replace(assignment, traps={"timeout": TrapText("timeout", "t", "e", "x", "f")})
    with pytest.raises(SpecError) as info:
        trap_catalog(clash)
    assert info.value.path == path.resolve() and info.value.key == "traps.timeout"
    assert str(path.resolve()) in str(info.value) and "'timeout' is a generic trap" in str(info.value)
