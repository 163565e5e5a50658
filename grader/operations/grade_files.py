"""`grader grade`: each file of a `GradeFiles` request graded on the full battery, its files written to its output
folder. The request is resolved here, once: the spec (cheap, before anything starts), the sandbox started ahead of
torch for a single file (grader.operations.early_start), the backend, the course's seed; then each file is graded
(grader.operations.grade) and written (grader.publishing.files)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grader.authoring.course_seed import choose_seed
from grader.authoring.discovery import find_assignment, load_spec
from grader.backends import detect_backend
from grader.operations.early_start import adopt, start_early
from grader.operations.requests import GradeFiles, UsageError
from grader.running.phases import traced

if TYPE_CHECKING:
    from grader.results import GradeResult


@dataclass(frozen=True)
class GradedFile:
    """One file graded: where it came from, where its results went, what it got."""

    path: Path
    out: Path
    result: GradeResult


def grade_files(request: GradeFiles, note: Callable[[str], None]) -> Iterator[GradedFile]:
    """Grade each file in turn, yielding each as it is written; `note` gets what the user should read on the way
    (the spec's load notes, a course seed created). UsageError (and the spec's own errors) before anything starts."""
    submissions = [existing_file(path) for path in request.submissions]
    stems = [path.stem for path in submissions]
    if len(set(stems)) != len(stems):
        raise UsageError("two submissions share a file name; grade them separately")
    calibration = request.calibration.store()
    spec = load_spec(request.assignment_id, request.assignments_root)  # a mistake here leaves no output folder
    for text in spec.load_notes:
        note(f"note: {text}")
    early = None
    if len(submissions) == 1:
        request.out.mkdir(parents=True, exist_ok=True)  # exists before any student code runs; hidden from it
        early = start_early(request.assignments_root, request.assignment_id, submissions[0], request.backend,
                            (str(request.out.resolve()),), calibration.folder, spec)
    try:
        with traced("grader/imports"):  # torch, while the early sandbox's zygote imports it
            from grader.operations.grade import GradeRequest, grade
            from grader.publishing.files import write_outputs

            assignment = find_assignment(request.assignment_id, request.assignments_root)
            backend = detect_backend(request.backend)
    except BaseException:
        if early is not None:
            early.close()
        raise
    early = adopt(early, backend)
    seed = choose_seed(assignment, request.seed, public_run=False)
    if seed.note:
        note(seed.note)
    for path in submissions:
        out = request.out if len(submissions) == 1 else request.out / path.stem
        out.mkdir(parents=True, exist_ok=True)  # exists before any student code runs; hidden from it
        result, pytest_report = grade(GradeRequest(
            assignment, path, backend, seed=seed.seed, seed_source=seed.source, hidden=(str(out.resolve()),),
            sanitize=request.sanitize, profile=request.profile, calibration=calibration, sandbox=early))
        early = None  # the first grade owns it (and closed it)
        with traced("grader/outputs"):
            write_outputs(out, result, assignment, pytest_report, prairielearn=request.prairielearn)
        yield GradedFile(path, out, result)


def existing_file(path: Path) -> Path:
    """The submission's absolute path; UsageError when it is not a file."""
    if not path.is_file():
        raise UsageError(f"submission {path} is not a file")
    return path.resolve()
