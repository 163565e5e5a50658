"""A submission's sandbox started before the command imports torch: its zygote imports torch and triton while this
process does (seconds a student would otherwise wait twice). Cheap to import (no torch), and owned here: a grade
made with `sandbox=` adopts it, or closes it when it was made for the other flavour of Triton."""

from __future__ import annotations

from pathlib import Path

from grader.authoring.spec import Assignment, SpecError, load_assignment
from grader.backends import Backend, likely_backend
from grader.running.processes.sandbox import Sandbox, start_sandbox
from grader.submission_file import fit


def start_early(assignments_root: Path, assignment_id: str | None, submission: Path, requested_backend: str,
                hidden: tuple[str, ...] = (), calibration_folder: Path | None = None,
                spec: Assignment | None = None, kept_caches: Path | None = None) -> Sandbox | None:
    """The submission's sandbox, started now, or None when the assignment or the backend cannot be told cheaply yet
    (the grade then starts its own). `spec`: the assignment's spec where the caller loaded it already (else it is
    found from the id or the file's name). `hidden`: what the grade will hide from the worker (its output folder);
    on CUDA the bars' cache folder is hidden too, as the grade hides it (grader.operations.grade.guard_calibration).
    `kept_caches`: `grader check`'s Triton caches, kept between checks (grader.running.processes.sandbox)."""
    if spec is None:
        path = _spec_path(assignments_root, assignment_id, submission)
        if path is None:
            return None
        try:
            spec = load_assignment(path)
        except SpecError:
            return None
    try:
        backend = likely_backend(requested_backend)
    except ValueError:
        return None
    if backend.on_gpu and calibration_folder is not None:
        hidden = (*hidden, str(calibration_folder.resolve()))
    try:
        return start_sandbox(spec, submission, backend, hidden, kept_caches=kept_caches)
    except OSError:
        return None


def adopt(sandbox: Sandbox | None, backend: Backend) -> Sandbox | None:
    """The early sandbox if it was made for `backend`'s flavour of Triton (its zygote imported Triton for one), else
    None (it is closed)."""
    if sandbox is None or (sandbox.options.backend == Backend.INTERPRETER.value) == (backend is Backend.INTERPRETER):
        return sandbox
    sandbox.close()
    return None


def _spec_path(assignments_root: Path, assignment_id: str | None, submission: Path) -> Path | None:
    """The assignment's spec: the one named, else the only one whose submission file the file's name fits."""
    if assignment_id:
        spec = assignments_root / assignment_id / "assignment.toml"
        return spec if spec.is_file() else None
    fitting = []
    for candidate in sorted(assignments_root.glob("*/assignment.toml")) if assignments_root.is_dir() else []:
        try:
            if fit(submission.name, load_assignment(candidate).submission_file):
                fitting.append(candidate)
        except SpecError:
            return None
    return fitting[0] if len(fitting) == 1 else None
