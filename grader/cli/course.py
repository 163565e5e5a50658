"""A class's commands: grade a whole class (`batch`), rank shared code (`similarity`), and write what ships to an
LMS or to students (`gradescope-bundle`, `classroom-workflow`, `student-bundle`)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from grader.backends import detect_backend
from grader.cli.grading import find_assignment_noting, require_spec
from grader.cli.parser import calibration_settings
from grader.environment import github_repo, installed_from_github
from grader.operations.requests import UsageError
from grader.publishing.plurals import counted


def cmd_batch(args: argparse.Namespace, root: Path) -> int:
    from grader.operations.batch import BatchError, BatchOptions, format_summary, run_batch
    from grader.operations.executors import ExecutorUnavailable

    assignment = find_assignment_noting(args.assignment, root)
    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers must be at least 1")
    if args.missing_score is not None and args.missing_score < 0:
        raise UsageError("--missing-score must not be negative")
    _require_files(args.allowed, "--allowed")
    options = BatchOptions(
        submissions=args.submissions, assignment=assignment, assignments_root=root, out=args.out,
        backend=detect_backend(args.backend), seed=args.seed, workers=args.workers, force=args.force,
        executor=args.executor, ray_address=args.ray_address, gpus_per_task=args.gpus_per_task,
        grade_timeout_s=args.grade_timeout, canvas_column=args.canvas_column,
        calibration=calibration_settings(args).store(),
        roster=args.roster, missing_score=args.missing_score, allowed=tuple(args.allowed), profile=args.profile,
        profile_every_case=args.profile_every_case,
    )
    try:
        summary = run_batch(options)
    except (BatchError, ExecutorUnavailable) as exc:
        raise UsageError(str(exc)) from None
    print(format_summary(summary, args.out))
    if summary.interrupted:
        return 130
    return 1 if summary.counts.get("error") else 0


def _require_files(paths: list[Path], option: str) -> None:
    for path in paths:
        if not path.exists():
            raise UsageError(f"{option} {path}: no such file or folder")


def cmd_similarity(args: argparse.Namespace, root: Path) -> int:
    from grader.operations.batch import BatchError
    from grader.operations.similarity import run_similarity

    assignment = require_spec(args.assignment, root)  # the spec alone: nothing is graded
    _require_files(args.allowed, "--allowed")
    try:
        comparison, paths = run_similarity(args.submissions, assignment, args.out, tuple(args.allowed))
    except BatchError as exc:
        raise UsageError(str(exc)) from None
    print(f"{counted(len(comparison.documents), 'submission')}, {counted(len(comparison.pairs), 'pair')} sharing "
          f"code beyond the template, {len(comparison.flagged)} flagged:")
    for pair in comparison.pairs[:10]:
        print(f"  {pair.score:.2f}  {pair.a}  {pair.b}{'  flagged' if pair.flagged else ''}")
    for path in paths:
        print(f"  {path}")
    return 0


def cmd_gradescope_bundle(args: argparse.Namespace, root: Path) -> int:
    from grader.operations.bundle import BundleError, BundleOptions, write_bundle

    assignment = find_assignment_noting(args.assignment, root)
    options = BundleOptions(assignment, args.out, torch=args.torch, torch_version=args.torch_version,
                            seed=args.seed)
    try:
        path = write_bundle(options)
    except BundleError as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote {path}: upload it as the autograder of a Gradescope programming assignment "
          f"(setup.sh installs torch {args.torch_version} {args.torch})")
    return 0


def cmd_classroom_workflow(args: argparse.Namespace, root: Path) -> int:
    from grader.atomic import write_text
    from grader.publishing.classroom import classroom_steps, classroom_workflow

    grader_repo = _grader_repo(args.grader_repo)
    assignment = find_assignment_noting(args.assignment, root)
    steps = classroom_steps(assignment, args.submission)
    if not steps:
        raise UsageError(f"{assignment.id} has no public cases: a GitHub Classroom workflow would grade nothing")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, classroom_workflow(assignment, grader_repo, args.submission, args.timeout))
    worth = f"{counted(len(steps), 'autograding step')}, {counted(sum(s.points for s in steps), 'point')}"
    print(f"wrote {args.out}: {worth}: the public cases, on the CPU "
          f"interpreter (the Classroom score covers public cases only). Commit it to the assignment's template "
          f"repository with the student bundle's files at its root ({assignment.submission_file}, README.md, "
          f"assignments/{assignment.id}/: `grader student-bundle`); {grader_repo} must hold no course secrets")
    return 0


def _grader_repo(given: str | None) -> str:
    """`--grader-repo` (OWNER/NAME, or a github.com URL), else the GitHub repository this grader was pip-installed
    from; never a placeholder (a workflow that installs from a repository that is not there fails for every
    student)."""
    if given:
        repo = github_repo(given) or given.strip().strip("/")
        if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo):
            raise UsageError(f"--grader-repo {given!r} is not OWNER/NAME of a GitHub repository")
        return repo
    found = installed_from_github()
    if found is None:
        raise UsageError("classroom-workflow needs --grader-repo OWNER/NAME: the GitHub repository of kernel-grader "
                         "that students' workflows pip-install (it must hold no reference/ and no hidden cases); "
                         "this grader was not pip-installed from one, so it cannot tell")
    return found


def cmd_student_bundle(args: argparse.Namespace, root: Path) -> int:
    from grader.operations.student_bundle import StudentBundleError, write_student_bundle

    assignment = find_assignment_noting(args.assignment, root)
    try:
        path = write_student_bundle(assignment, args.out)
    except StudentBundleError as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote {path}: students unzip it and run, in the folder {assignment.id}/,\n"
          f"  grader check {assignment.submission_file} --assignments assignments")
    return 0
