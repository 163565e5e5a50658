"""`grader` as a function: `main(argv) -> int` parses the command line (grader.cli.parser), runs the subcommand
(grader.cli.grading, grader.cli.course) and turns a user's mistake into one line and exit code 2. A command that
runs kernels first says, in one line, when the running Triton is not the one the grader pins."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from grader.authoring.discovery import AssignmentNotFound, assignments_root
from grader.authoring.mutants import MutantError
from grader.authoring.spec import SpecError
from grader.cli import course, grading
from grader.cli.parser import build_parser
from grader.environment import triton_mismatch
from grader.operations.notebook import NotebookError
from grader.operations.requests import UsageError
from grader.running.processes import cpu_threads

COMMANDS: dict[str, Callable[..., int]] = {
    "list": grading.cmd_list,
    "new-assignment": grading.cmd_new_assignment,
    "grade": grading.cmd_grade,
    "check": grading.cmd_check,
    "selftest": grading.cmd_selftest,
    "mutant": grading.cmd_mutant,
    "margins": grading.cmd_margins,
    "course-seed": grading.cmd_course_seed,
    "batch": course.cmd_batch,
    "similarity": course.cmd_similarity,
    "gradescope-bundle": course.cmd_gradescope_bundle,
    "classroom-workflow": course.cmd_classroom_workflow,
    "student-bundle": course.cmd_student_bundle,
}
# the commands that run kernels: Triton's version decides what its interpreter runs and its compiler accepts
RUNS_KERNELS = frozenset({"grade", "check", "selftest", "batch"})
# the commands that grade one file at a time in this process (a batch and a selftest share the CPUs among their own)
ONE_GRADE_AT_A_TIME = frozenset({"grade", "check"})


def main(argv: list[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(given)
    if args.command == "check" and args.warm and not args.wait_for_go:
        from grader.operations import warm_check

        served = warm_check.check_warm(warm_check.check_arguments(given), sys.stdout, sys.stderr)
        if served is not None:
            return served
    root: Path = assignments_root(args.assignments)
    if args.command in ONE_GRADE_AT_A_TIME:
        cpu_threads.share_for_this_process()  # before torch is imported: its pool and each worker's, one grade's share
    if args.command in RUNS_KERNELS and (mismatch := triton_mismatch()):
        print(f"grader: {mismatch}", file=sys.stderr)  # a warning only: the grade goes on
    try:
        code = COMMANDS[args.command](args, root)
    except _user_errors() as exc:
        print(f"grader: error: {exc}", file=sys.stderr)
        return 2
    if args.command == "check" and args.warm and not args.wait_for_go:
        if warm_check.start_server(warm_check.check_arguments(given)):
            print("grader: a check process is kept ready for the next `grader check --warm` of this file (it stops "
                  "after 20 minutes unused)", file=sys.stderr)
    return code


def _user_errors() -> tuple[type[Exception], ...]:
    """The exceptions whose message is for the user (evaluated when one is raised: CheckError's module is heavy)."""
    from grader.operations.interactive import CheckError

    return (UsageError, SpecError, AssignmentNotFound, MutantError, NotebookError, CheckError)


def entry_point() -> None:
    sys.exit(main())
