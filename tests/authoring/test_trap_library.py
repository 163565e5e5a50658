"""Trap texts from TOML (grader/authoring/trap_library.py): an assignment may not redefine a generic trap;
the course's trap library (traps.toml beside assignments/) lends its traps to the assignments that name them
in `[assignment] shared_traps`, each the assignment's in every way; a library mistake fails at load, naming
the file."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from grader.authoring.discovery import load_validated
from grader.authoring.public import COURSE_TRAPS
from grader.authoring.spec import SpecError, load_assignment, load_public_assignment, load_trap_library
from grader.cli import main
from tests.authoring.test_spec import TRAP, VALID, spec_error
from tests.conftest import ROOT


def test_loading_refuses_an_assignment_trap_with_a_generic_id(tmp_path: Path) -> None:
    err = spec_error(tmp_path, VALID + TRAP.format(id="oob-read"))
    assert err.key == "traps.oob-read" and "'oob-read' is a generic trap" in err.problem


def test_fused_layers_takes_eps_outside_sqrt_from_the_course_library() -> None:
    library = load_trap_library(ROOT / COURSE_TRAPS)
    assert "eps-outside-sqrt" in library
    assignment = load_validated(ROOT / "assignments" / "fused_layers" / "assignment.toml")
    assert assignment.shared_traps == ("eps-outside-sqrt",)
    assert assignment.traps["eps-outside-sqrt"] == library["eps-outside-sqrt"]
    assert "[traps.eps-outside-sqrt]" not in (assignment.spec_path).read_text(encoding="utf-8")  # written once
    public = load_public_assignment(assignment.spec_path)
    assert public.traps["eps-outside-sqrt"] == library["eps-outside-sqrt"]


SHARING = '''
[my-shared-trap]
title = "A trap two assignments share"
explanation = "Shared."
exposed_by = "Any row."
fix = "Do it right."
'''


def sharing_course(tmp_path: Path, library: str) -> Path:
    """A scaffold course whose assignment takes its trap from the course library instead of its own table."""
    assignments = tmp_path / "course" / "assignments"
    assert main(["new-assignment", "row_sums", "--assignments", str(assignments)]) == 0
    spec = assignments / "row_sums" / "assignment.toml"
    text = spec.read_text(encoding="utf-8")
    start, end = text.index("[traps.last-column-dropped]"), text.index("# ----", text.index("[traps.last-column"))
    own = text[start:end]
    text = text.replace(own, "").replace('import_timeout_s = 60\n',
                                         'import_timeout_s = 60\nshared_traps = ["last-column-dropped"]\n')
    spec.write_text(text, encoding="utf-8")
    (tmp_path / "course" / COURSE_TRAPS).write_text(
        library + own.replace("[traps.last-column-dropped]", "[last-column-dropped]"), encoding="utf-8")
    return spec


def test_a_scaffold_can_take_its_trap_from_the_library(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = sharing_course(tmp_path, SHARING)
    assignment = load_validated(spec)  # validates: its trap function and its mutant find the shared text
    assert assignment.shared_traps == ("last-column-dropped",)
    assert "my-shared-trap" not in assignment.traps  # only what it names
    bundle = tmp_path / "student.zip"
    assert main(["--assignments", str(spec.parent.parent), "student-bundle", "--assignment", "row_sums",
                 "--out", str(bundle)]) == 0

    with zipfile.ZipFile(bundle) as zf:
        shipped = zf.read("row_sums/assignments/row_sums/assignment.toml").decode()
        assert "[traps.last-column-dropped]" in shipped and "shared_traps" not in shipped
        assert not [n for n in zf.namelist() if n.endswith(COURSE_TRAPS)]


@pytest.mark.parametrize(("change", "problem"), [
    (lambda spec, lib: (spec.replace('"last-column-dropped"]', '"nope"]'), lib), "'nope' is not in the course's"),
    (lambda spec, lib: (spec, None), "the course has no trap library"),
    (lambda spec, lib: (spec, lib + '\n[oob-read]\ntitle = "x"\nexplanation = "x"\nexposed_by = "x"\nfix = "x"\n'),
     "'oob-read' is a generic trap"),
    (lambda spec, lib: (spec + '\n[traps.last-column-dropped]\ntitle = "t"\nexplanation = "e"\nexposed_by = "x"\n'
                        'fix = "f"\n', lib), "is also in the course's trap library"),
])
def test_library_mistakes_fail_at_load_naming_the_file(tmp_path: Path, change, problem: str) -> None:
    spec = sharing_course(tmp_path, SHARING)
    library = tmp_path / "course" / COURSE_TRAPS
    new_spec, new_library = change(spec.read_text(encoding="utf-8"), library.read_text(encoding="utf-8"))
    spec.write_text(new_spec, encoding="utf-8")
    if new_library is None:
        library.unlink()
    else:
        library.write_text(new_library, encoding="utf-8")
    with pytest.raises(SpecError, match=problem) as caught:
        load_assignment(spec)
    assert caught.value.path in (spec, library)
