"""`grader student-bundle`: the zip a course hands its students for one assignment.

Layout (one folder named after the assignment, so unzipping never spills files):

    <id>/<submission_file>, <id>/README.md   student_template/<id>/: the starting file and the assignment text
    <id>/assignments/<id>/assignment.toml    the public form of the spec (grader.authoring.public)
    <id>/assignments/<id>/oracles.py         the oracle module, which `grader check` needs

so a student with the grader installed runs, inside <id>/,

    grader check <submission_file> --assignments assignments

and sees the report `grader check` shows with the full assignment folder (same public cases, same
oracles, same traps).

What ships is named, not filtered: the template folder, the public form of the spec and the module the
spec names. So the hidden cases and everything under reference/<id>/ (the reference solution, the mutant
corpus, the variants) stay out without being listed anywhere; with no reference, a student's performance
case is timed against torch only. What a student may see: the public cases (`grader check` shows them
anyway), the trap texts (a report shows them when a case fails) and the oracle module: it
computes expected outputs with torch.nn modules and predicts each trap's output, which tells no more
than the assignment text and the trap texts do. An assignment whose oracles.py holds more (a solution
written in torch, say) should not be bundled for students.
"""

from __future__ import annotations

from pathlib import Path

from grader.atomic import write_zip
from grader.authoring.public import public_toml
from grader.authoring.spec import TEMPLATE_DIR, Assignment, course_library_path

ASSIGNMENTS_DIR = "assignments"


class StudentBundleError(Exception):
    """A problem building the student bundle; the message is for the course staff."""


# ------------------------------------------------------------------------------------------- the zip


def student_files(assignment: Assignment) -> dict[str, bytes]:
    """Every file of the student zip: name -> bytes."""
    template = assignment.template_dir
    expected = assignment.course_root / TEMPLATE_DIR / assignment.id
    if template is None or not (template / assignment.submission_file).is_file():
        raise StudentBundleError(f"{expected / assignment.submission_file} is missing: the student bundle "
                                 f"starts from the template in {TEMPLATE_DIR}/{assignment.id}/")
    top = assignment.id
    files: dict[str, bytes] = {}
    for path in sorted(p for p in template.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        files[f"{top}/{path.relative_to(template).as_posix()}"] = path.read_bytes()
    spec_dir = f"{top}/{ASSIGNMENTS_DIR}/{assignment.id}"
    library = course_library_path(assignment.spec_path)  # its shared traps are written into the public form
    public = public_toml(assignment.spec_path.read_text(encoding="utf-8"),
                         library.read_text(encoding="utf-8") if library.is_file() else None)
    files[f"{spec_dir}/{assignment.spec_path.name}"] = public.encode()
    files[f"{spec_dir}/{assignment.module}"] = (assignment.root / assignment.module).read_bytes()
    return files


def write_student_bundle(assignment: Assignment, out: Path) -> Path:
    """Write the zip deterministically (sorted names, fixed dates) via a temporary file and os.replace."""
    return write_zip(Path(out), {name: (data, 0o644) for name, data in student_files(assignment).items()})
