"""`grader check` as a function, for a notebook cell: `from grader import check; check("fused_layers.ipynb")`.

Runs the public cases of the submission (a `.py` file or a notebook, see grader.operations.notebook), shows
the report (the HTML report inline when running under IPython/Jupyter/Colab, else the terminal report)
and returns the GradeResult. The CLI's `grader check` uses the same two steps.
"""

from __future__ import annotations

import os
from pathlib import Path

from grader.authoring.discovery import assignments_fitting, assignments_root, find_assignment, list_assignment_ids
from grader.authoring.spec import Assignment
from grader.backends import Backend, detect_backend
from grader.operations.compile_memo import default_memo_folder
from grader.operations.grade import GradeRequest, grade
from grader.publishing import report
from grader.results import GradeResult
from grader.running.processes.sandbox import Sandbox
from grader.running.timing.calibration import CalibrationStore, default_folder

# What a check says of the performance cases it does not time on a GPU (a check is the quick loop).
NOT_TIMED_BY_CHECK = ("a check does not time them (`grader check --timed`, or check(..., timed=True), times them "
                      "against the reference; `grader grade` always does)")


class CheckError(Exception):
    """A mistake in what was asked of `check`; the message is for the student."""


def resolve_assignment(assignment_id: str | None, path: Path, root: Path) -> Assignment:
    """The public form of the assignment (grader.authoring.public): `check` never loads hidden cases."""
    if assignment_id:
        return find_assignment(assignment_id, root, public=True)
    found = assignments_fitting(path, root, public=True)
    if len(found) == 1:
        return found[0]
    if found:
        why = f"it fits several assignments' files ({', '.join(a.id for a in found)})"
    else:
        known = [find_assignment(i, root, public=True) for i in list_assignment_ids(root)]
        files = ", ".join(f"{a.id}: {a.submission_file}" for a in known) or f"no assignments under {root}"
        why = f"it fits no assignment's file ({files})"
    raise CheckError(f"cannot tell the assignment from the file name {path.name}: {why}; pass --assignment ID")


def run_check(path: Path, assignment: Assignment, backend: Backend, seed: int | None = None,
              targets: tuple[str, ...] = (), calibration: CalibrationStore | None = None,
              sandbox: Sandbox | None = None, timed: bool = False,
              profile: bool = False) -> tuple[GradeResult, str]:
    """The public cases of `path` (only `targets`' when given) on `backend`;
    performance bars cached in `calibration` (None: measured for this check alone); `sandbox`: the
    submission's sandbox, started ahead (the command line starts it before importing torch); `timed`: the
    performance cases timed on CUDA (off: a check is the quick loop, and says how to time them); `profile`: the
    timed cases replayed under Nsight Compute too."""
    unknown = [t for t in targets if t not in assignment.targets]
    if unknown:
        if sandbox is not None:
            sandbox.close()
        raise CheckError(f"no target {unknown[0]!r} in {assignment.id} (known: {', '.join(assignment.targets)})")
    return grade(GradeRequest(assignment, path, backend, seed=seed, public_only=True, targets=targets,
                              calibration=calibration, sandbox=sandbox, profile=profile,
                              untimed="" if timed else NOT_TIMED_BY_CHECK, compile_memo=default_memo_folder()))


def check(submission: str | os.PathLike[str], assignment: str | None = None, *, target: str | None = None,
          backend: str = "auto", seed: int | None = None, assignments: str | os.PathLike[str] | None = None,
          show: bool = True, timed: bool = False) -> GradeResult:
    """Run the public cases on `submission` (.py or .ipynb) and show the report; return the result.

    `assignment` defaults to the one whose submission file has this name (`fused_layers.py` or
    `fused_layers.ipynb`); `target` keeps one kernel's or function's cases. Under IPython (Jupyter, Colab)
    the HTML report is displayed inline, elsewhere the terminal report is printed; `show=False` shows nothing.
    `timed`: on a GPU, the performance cases are timed against the reference too (seconds more).
    A notebook that calls `check` on itself is read as last saved: save it first.
    """
    path = Path(submission).resolve()
    if not path.is_file():
        raise CheckError(f"submission {path} is not a file")
    spec = resolve_assignment(assignment, path, assignments_root(assignments))
    result, _ = run_check(path, spec, detect_backend(backend), seed, (target,) if target else (),
                          CalibrationStore(default_folder()), timed=timed)
    if show:
        show_report(result, spec)
    return result


def show_report(result: GradeResult, assignment: Assignment) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import HTML, display
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(HTML(report.html(result, assignment)))
    else:
        print(report.terminal(result, assignment))
