"""`grader check`: a `CheckFile` request resolved once (the sandbox started ahead of torch, the public form of the
assignment the file fits, the backend) and the file run on the public cases (grader.operations.interactive)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grader.backends import detect_backend
from grader.operations.early_start import adopt, start_early
from grader.operations.grade_files import existing_file
from grader.operations.requests import CheckFile
from grader.running.phases import traced

KEPT_TRITON_FOLDER = "check-triton"  # beside the calibration folder: a check's Triton caches, kept between checks

if TYPE_CHECKING:
    from grader.authoring.spec import Assignment
    from grader.results import GradeResult


@dataclass(frozen=True)
class CheckedFile:
    """The file's public grade, the public form of its assignment, and pytest-json-report's record."""

    result: GradeResult
    assignment: Assignment
    pytest_report: str


def check_file(request: CheckFile, go: Callable[[], bool] | None = None) -> CheckedFile | None:
    """Run the file's public cases (only `targets`' when given); with `out`, also write its results and reports.
    `go`: asked once everything before the cases is ready (the imports, the sandbox), before the file is read; False
    means the check is not wanted any more, and None is returned (a warm check's held process:
    grader.operations.warm_check)."""
    path = existing_file(request.submission)
    calibration = request.calibration.store()
    early = start_early(request.assignments_root, request.assignment_id, path, request.backend, (),
                        calibration.folder, kept_caches=calibration.folder.parent / KEPT_TRITON_FOLDER)
    try:
        with traced("grader/imports"):
            from grader.operations.interactive import resolve_assignment, run_check  # torch, meanwhile

            assignment = resolve_assignment(request.assignment_id, path, request.assignments_root)
            backend = detect_backend(request.backend)
    except BaseException:
        if early is not None:
            early.close()
        raise
    try:
        wanted = go is None or go()
    except BaseException:  # Ctrl-C, or the warm server's SIGINT, while waiting
        wanted = False
        raise
    finally:
        if not wanted and early is not None:
            early.close()
    if not wanted:
        return None
    result, pytest_report = run_check(path, assignment, backend, request.seed, request.targets, calibration,
                                      sandbox=adopt(early, backend), timed=request.timed, profile=request.profile)
    if request.out is not None:
        from grader.publishing.files import write_outputs

        with traced("grader/outputs"):
            write_outputs(request.out, result, assignment, pytest_report)
    return CheckedFile(result, assignment, pytest_report)
