"""Trap texts read from TOML: an assignment's own [traps.<id>] tables, the course's trap library (traps.toml
beside assignments/) and the library's traps an assignment takes by name in `shared_traps`. A generic
trap's id (grader/trap_ids.py) is the grader's: no assignment or library may redefine it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from grader import trap_ids
from grader.authoring.course_layout import course_library_path
from grader.authoring.public import SHARED_TRAPS
from grader.authoring.spec_model import TrapText
from grader.authoring.spec_reader import SpecError, SpecReader, read_spec


def redefines_generic_trap(spec_path: Path, trap_id: str) -> SpecError:
    """An assignment's [traps.<id>] may not take a generic trap's id (grader/trap_ids.py)."""
    return SpecError(spec_path, f"traps.{trap_id}", f"{trap_id!r} is a generic trap of the grader "
                     "(grader/authoring/generic_traps.toml), which an assignment may not redefine; "
                     "give this trap an id of its own")


def load_trap(trap_id: str, r: SpecReader) -> TrapText:
    if trap_id in trap_ids.GENERIC:
        raise redefines_generic_trap(r.path, trap_id)
    r.reject_unknown({"title", "explanation", "exposed_by", "fix", "section"})
    return TrapText(
        id=trap_id,
        title=r.get("title", str),
        explanation=r.get("explanation", str),
        exposed_by=r.get("exposed_by", str),
        fix=r.get("fix", str),
        section=r.get("section", str, ""),
    )


def load_trap_library(path: Path) -> dict[str, TrapText]:
    """A trap library (the course's traps.toml): one [<trap-id>] table
    each, with the keys of an assignment's [traps.<id>]; errors name the file and the trap."""
    top = SpecReader(Path(path), read_spec(path), "")
    library = {}
    for tid, value in top.table.items():
        if not isinstance(value, dict):
            raise top.fail(tid, "must be a table: [<trap-id>] with title, explanation, exposed_by, fix")
        library[tid] = load_trap(tid, SpecReader(top.path, value, tid))
    return library


def load_shared_traps(head: SpecReader, spec_path: Path, own: Mapping[str, TrapText]) -> dict[str, TrapText]:
    """The course library's traps this assignment names in `shared_traps`, checked against the library."""
    names = head.strings(SHARED_TRAPS, ())
    if not names:
        return {}
    path = course_library_path(spec_path)
    if not path.is_file():
        raise head.fail(SHARED_TRAPS, f"names course traps, but the course has no trap library ({path})")
    library = load_trap_library(path)
    shared = {}
    for tid in names:
        if tid not in library:
            raise head.fail(SHARED_TRAPS, f"{tid!r} is not in the course's trap library {path} "
                            f"(it has: {', '.join(sorted(library)) or 'none'})")
        if tid in own:
            raise SpecError(spec_path, f"traps.{tid}", f"is also in the course's trap library {path}, which "
                            f"[assignment] {SHARED_TRAPS} takes it from: keep one")
        shared[tid] = library[tid]
    return shared
