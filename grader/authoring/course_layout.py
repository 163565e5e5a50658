"""The three folders of a course, split by who may see them (the checkout is one course):

    assignments/<id>/       the contract the grader needs: assignment.toml and its oracle module
    reference/<id>/         course staff only: reference.py, mutants.toml, mutants/, variants/
    student_template/<id>/  what students start from: the starting file and README.md

The course root is the assignments folder's parent. A spec loads with the other two folders as paths (None
where a folder is absent); what older layouts kept beside the spec fails to load, saying where it belongs,
and an older spec's `[assignment] reference` key loads with a note when it names the layout's file."""

from __future__ import annotations

from pathlib import Path

from grader.authoring.public import COURSE_TRAPS
from grader.authoring.spec_reader import SpecError, SpecReader

# The three folders of a course (module docstring). Nothing under REFERENCE_DIR ships anywhere (wheel,
# student bundle, Gradescope bundle, Classroom) and workers cannot see it.
REFERENCE_DIR = "reference"
TEMPLATE_DIR = "student_template"
REFERENCE_FILE = "reference.py"  # the reference solution, in reference/<id>/: what mutants patch
# What older layouts kept inside assignments/<id>/, and where it belongs now (a spec that still has it
# fails to load, so nothing secret is left beside the contract).
MOVED = {"reference.py": REFERENCE_DIR, "mutants.toml": REFERENCE_DIR, "mutants": REFERENCE_DIR,
         "variants": REFERENCE_DIR, "template": TEMPLATE_DIR}


def course_library_path(spec_path: Path) -> Path:
    """The course's trap library: traps.toml in the course folder (beside assignments/)."""
    return Path(spec_path).parent.parent.parent / COURSE_TRAPS


def course_folders(spec_path: Path, assignment_id: str) -> tuple[Path | None, Path | None]:
    """(reference/<id>/, student_template/<id>/) of the course the spec belongs to, each None if absent."""
    course = Path(spec_path).parent.parent.parent
    reference, template = course / REFERENCE_DIR / assignment_id, course / TEMPLATE_DIR / assignment_id
    return (reference if reference.is_dir() else None), (template if template.is_dir() else None)


def reject_moved(spec_path: Path) -> None:
    """Older layouts kept the reference, mutants and template beside the spec: say where they belong."""
    for name, home in MOVED.items():
        if (spec_path.parent / name).exists():
            raise SpecError(spec_path.parent / name, "", f"does not belong beside the spec (assignments/ holds "
                            f"only the contract: the spec and its oracle module); move it to {home}/"
                            f"{spec_path.parent.name}/ of the course (docs/writing-an-assignment.md)")


def older_reference_key(head: SpecReader, spec_path: Path, assignment_id: str) -> tuple[str, ...]:
    """`[assignment] reference`, which specs written from older docs carry: the reference solution's file. The
    course layout fixes that file at reference/<id>/reference.py, so a key naming it (`"reference.py"`, or a
    path to reference/<id>/reference.py from the spec's folder or the course's) says what the layout says: it
    loads, with a one-line note to remove it. A key naming any other file contradicts the layout: an error
    (the grader would silently grade mutants of a file the author did not mean). `""` (how student bundles
    before the layout said "none") loads without a note."""
    value = head.get("reference", str, "")
    if value == "":
        return ()
    course = spec_path.parent.parent.parent
    layout = (course / REFERENCE_DIR / assignment_id / REFERENCE_FILE).resolve()
    named = Path(value)
    same = named == Path(REFERENCE_FILE) or any(
        (base / named).resolve() == layout for base in (spec_path.parent, course))
    where = f"{REFERENCE_DIR}/{assignment_id}/{REFERENCE_FILE}"
    if not same:
        raise head.fail("reference", f"names {value!r}, but the reference solution is {where} of the course "
                        f"(beside assignments/) whatever this key says: put the reference there and remove the key")
    return (f"{spec_path}: [assignment] reference = {value!r} is no longer needed (the reference solution is always "
            f"{where}, which it names): remove the key",)
