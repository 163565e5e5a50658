"""Command line: `grader grade | check | selftest | mutant | list | batch | similarity | gradescope-bundle |
student-bundle | new-assignment | classroom-workflow | course-seed | margins`. `main(argv) -> int`; a thin entry
point."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from grader.authoring.course_seed import choose_seed, ensure_course_seed, rotate_course_seed
from grader.authoring.discovery import (
    AssignmentNotFound,
    assignments_root,
    find_assignment,
    list_assignment_ids,
    require_folder,
)
from grader.authoring.mutants import Mutant, MutantError, load_mutants, write_mutant
from grader.authoring.spec import Assignment, SpecError, load_assignment
from grader.environment import detect_backend, github_repo, grader_version, installed_from_github
from grader.operations.executors import EXECUTORS
from grader.operations.notebook import NotebookError
from grader.running.processes.sandbox import Sandbox, start_sandbox
from grader.running.timing.calibration import DEFAULT_MAX_AGE_S, CalibrationStore, default_folder
from grader.seeds import fresh_seed
from grader.submission_file import fit

# Imported where used, not here: grader.operations.grade, .interactive, grader.publishing.report and .files
# import torch (seconds), and `grade` / `check` start the submission's sandbox before that (_early_sandbox).

DEFAULT_MAX_AGE_H = DEFAULT_MAX_AGE_S / 3600
ASSIGNMENTS_HELP = ("folder of assignments (default: $GRADER_ASSIGNMENTS, else the checkout's assignments/, "
                    "else the examples shipped with the package)")
ASSIGNMENT_HELP = "the assignment's id: its folder under the assignments folder (`grader list` shows them)"


class UsageError(Exception):
    """A mistake in how the grader was called; its message is for the user."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grader", description="Autograder for Triton kernel assignments.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {grader_version()}",
                        help="print the grader's version and exit")
    parser.add_argument("--assignments", help=ASSIGNMENTS_HELP)
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("grade", help="grade submissions on the full (hidden) battery and write results")
    g.add_argument("submissions", nargs="+", type=Path,
                   help="the files to grade (.py or .ipynb), each graded on its own")
    g.add_argument("--assignment", required=True, help=ASSIGNMENT_HELP)
    g.add_argument("--out", required=True, type=Path,
                   help="output folder; with several submissions, one subfolder per submission (file stem)")
    g.add_argument("--sanitize", action="store_true",
                   help="CUDA: run every kernel case once more under compute-sanitizer memcheck (slow)")
    g.add_argument("--prairielearn", action="store_true",
                   help="also write prairielearn.json, PrairieLearn's external-grader results "
                        "(copy it to /grade/results/results.json)")
    _common(g)
    _calibration(g)

    c = sub.add_parser("check", help="run the public cases on your submission and explain every failure")
    c.add_argument("submission", type=Path, help="your file (.py or .ipynb)")
    c.add_argument("--assignment", help="default: the assignment whose submission file has this name")
    c.add_argument("--out", type=Path, help="also write results and reports here")
    c.add_argument("--target", action="append", default=[],
                   help="only this kernel's or function's cases (repeatable); exit 0 iff they all pass")
    _common(c)
    _calibration(c)

    s = sub.add_parser("selftest", help="grade the reference and mutant corpus; fail on any misdiagnosis")
    s.add_argument("--assignment", required=True, help=ASSIGNMENT_HELP)
    s.add_argument("--jobs", type=int, default=1, help="submissions graded at a time (default 1)")
    s.add_argument("--out", type=Path, help="also write each submission's results and reports here")
    s.add_argument("--seeds", type=int, default=1, metavar="N",
                   help="grade each submission at N seeds (--seed and the N-1 after it); a score or trap that "
                        "changes with the seed is a MISS (default 1)")
    s.add_argument("--only", action="append", default=None, metavar="ID",
                   help="grade only this submission of the corpus (repeatable; see `grader mutant --list`)")
    _common(s)

    r = sub.add_parser("margins", help="does a case's verdict depend on the draw? every trap's predicted output "
                                         "against each case's tolerance, at many seeds (no kernel runs)")
    r.add_argument("--assignment", required=True, help=ASSIGNMENT_HELP)
    r.add_argument("--seeds", type=int, default=40, metavar="N", help="seeds 0..N-1 (default 40)")
    r.add_argument("--backend", choices=("interpreter", "cuda"), action="append",
                   help="the tolerances of this backend (repeatable; default both)")
    r.add_argument("--all", action="store_true", help="list every (case, trap), not only those that depend")

    m = sub.add_parser("mutant", help="write out, diff or list an assignment's mutants (the selftest corpus)")
    m.add_argument("ids", nargs="*", metavar="ID", help="mutant ids (see --list)")
    m.add_argument("--assignment", required=True, help=ASSIGNMENT_HELP)
    m.add_argument("--write", type=Path, metavar="DIR", help="write each mutant as the submission DIR/<id>.py")
    m.add_argument("--diff", action="store_true", help="print each mutant's unified diff against the reference")
    m.add_argument("--all", action="store_true", help="every mutant and variant of the assignment")
    m.add_argument("--list", action="store_true", help="list the mutants with their traps and mistakes")

    sub.add_parser("list", help="list the assignments with their kernels, functions and points")
    n = sub.add_parser("new-assignment", help="write a new assignment folder to start from (validates, passes "
                                              "its selftest)")
    n.add_argument("id", help="the new assignment's id: its folder and submission file name")
    k = sub.add_parser("course-seed", help="show or rotate the course's grading seed (reference/course-seed.toml)")
    k.add_argument("--rotate", action="store_true",
                   help="replace it with a new one: later grades draw other inputs (a batch regrades its students)")
    k.add_argument("--show", action="store_true", help="print the seed itself (it is as secret as the reference)")
    _add_batch_parsers(sub)
    for command in sub.choices.values():  # accepted after the subcommand too, where users type it
        command.add_argument("--assignments", default=argparse.SUPPRESS, help=ASSIGNMENTS_HELP)
    return parser


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", choices=("auto", "interpreter", "cuda"), default="auto",
                   help="where kernels run: cuda (a GPU), interpreter (Triton's CPU interpreter), or auto "
                        "(cuda when a GPU is usable; the default)")
    p.add_argument("--seed", type=int, help="input seed (default: the course's seed, reference/course-seed.toml, "
                                            "created once; a public run's: the assignment's public seed); recorded "
                                            "in the results, so the same file always gets the same grade")


def _calibration(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calibration-dir", type=Path, metavar="DIR",
                   help="where performance cases' bars (reference and torch eager timings) are cached across "
                        "runs (default: $GRADER_CACHE_DIR/calibration, else $XDG_CACHE_HOME/kernel-grader/"
                        "calibration, else ~/.cache/kernel-grader/calibration)")
    p.add_argument("--recalibrate", action="store_true",
                   help="measure the bars again instead of using cached ones (later grades of this run reuse them)")
    p.add_argument("--calibration-max-age", type=float, metavar="HOURS", default=DEFAULT_MAX_AGE_H,
                   help=f"cached bars older than this are measured again (default {DEFAULT_MAX_AGE_H:g})")


def calibration_store(args: argparse.Namespace) -> CalibrationStore:
    """The bars' cache the calibration options name (made once per command: --recalibrate starts now)."""
    if args.calibration_max_age < 0:
        raise UsageError("--calibration-max-age must not be negative")
    folder = (args.calibration_dir or default_folder()).resolve()  # children grade in folders of their own
    store = CalibrationStore(folder, args.calibration_max_age * 3600)
    return store.recalibrated() if args.recalibrate else store


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    root = assignments_root(args.assignments)
    try:
        if args.command == "list":
            return cmd_list(root)
        if args.command == "new-assignment":
            return cmd_new_assignment(args, root)
        if args.command == "grade":
            return cmd_grade(args, root)
        if args.command == "check":
            return cmd_check(args, root)
        if args.command == "selftest":
            return cmd_selftest(args, root)
        if args.command == "mutant":
            return cmd_mutant(args, root)
        if args.command == "batch":
            return cmd_batch(args, root)
        if args.command == "similarity":
            return cmd_similarity(args, root)
        if args.command == "gradescope-bundle":
            return cmd_gradescope_bundle(args, root)
        if args.command == "classroom-workflow":
            return cmd_classroom_workflow(args, root)
        if args.command == "student-bundle":
            return cmd_student_bundle(args, root)
        if args.command == "course-seed":
            return cmd_course_seed(args, root)
        if args.command == "margins":
            return cmd_margins(args, root)
    except _user_errors() as exc:
        print(f"grader: error: {exc}", file=sys.stderr)
        return 2
    raise AssertionError(args.command)


def _user_errors() -> tuple[type[Exception], ...]:
    """The exceptions whose message is for the user (evaluated when one is raised: CheckError's module is heavy)."""
    from grader.operations.interactive import CheckError

    return (UsageError, SpecError, AssignmentNotFound, MutantError, NotebookError, CheckError)


def _early_sandbox(assignment_id: str | None, submission: Path, root: Path, backend: str,
                   hidden: tuple[str, ...], calibration: CalibrationStore | None) -> Sandbox | None:
    """The submission's sandbox, started before this process imports torch (its zygote's imports of torch
    and triton overlap ours), or None when the assignment or the backend cannot be told cheaply yet. The
    grade checks it fits (GradeRequest.sandbox) and starts its own otherwise."""
    spec = None
    if assignment_id:
        spec = root / assignment_id / "assignment.toml"
    else:
        fitting = []
        for candidate in sorted(root.glob("*/assignment.toml")) if root.is_dir() else []:
            try:
                if fit(submission.name, load_assignment(candidate).submission_file):
                    fitting.append(candidate)
            except SpecError:
                return None
        spec = fitting[0] if len(fitting) == 1 else None
    if spec is None or not spec.is_file():
        return None
    if backend == "auto":
        backend = "cuda" if Path("/dev/nvidiactl").exists() else "interpreter"  # detect_backend confirms it
    if backend == "cuda" and calibration is not None:
        hidden = (*hidden, str(calibration.folder.resolve()))  # as grade.guard_calibration hides it
    try:
        return start_sandbox(load_assignment(spec), submission, backend, hidden)
    except (SpecError, OSError):
        return None


def _adopt(sandbox: Sandbox | None, backend: str) -> Sandbox | None:
    """The early sandbox if it was made for `backend` (the zygote imported Triton for one flavour), else
    none (it is closed)."""
    if sandbox is None or (sandbox.options.backend == "interpreter") == (backend == "interpreter"):
        return sandbox
    sandbox.close()
    return None


def entry_point() -> None:
    sys.exit(main())


def _submission(path: Path) -> Path:
    if not path.is_file():
        raise UsageError(f"submission {path} is not a file")
    return path.resolve()


def cmd_grade(args: argparse.Namespace, root: Path) -> int:
    submissions = [_submission(p) for p in args.submissions]
    stems = [p.stem for p in submissions]
    if len(set(stems)) != len(stems):
        raise UsageError("two submissions share a file name; grade them separately")
    calibration = calibration_store(args)
    _require_spec(args.assignment, root)  # an unknown assignment or a broken spec leaves no output folder behind
    early = None
    if len(submissions) == 1:
        args.out.mkdir(parents=True, exist_ok=True)  # exists before any student code runs; hidden from it
        early = _early_sandbox(args.assignment, submissions[0], root, args.backend, (str(args.out.resolve()),),
                               calibration)
    from grader.operations.grade import GradeRequest, grade
    from grader.publishing.files import write_outputs

    assignment = find_assignment(args.assignment, root)
    backend = detect_backend(args.backend)
    early = _adopt(early, backend)
    seed = choose_seed(assignment, args.seed, public_run=False)
    if seed.note:
        print(f"grader: {seed.note}", file=sys.stderr)
    for path in submissions:
        out = args.out if len(submissions) == 1 else args.out / path.stem
        out.mkdir(parents=True, exist_ok=True)  # exists before any student code runs; hidden from it
        result, pytest_report = grade(GradeRequest(assignment, path, backend, seed=seed.seed, seed_source=seed.source,
                                                   hidden=(str(out.resolve()),), sanitize=args.sanitize,
                                                   calibration=calibration, sandbox=early))
        write_outputs(out, result, assignment, pytest_report, prairielearn=args.prairielearn)
        traps = ", ".join(result.traps) or "none"
        print(f"{path.name}: {result.score:g} / {result.max_score:g}  traps: {traps}  "
              f"({result.execution_time_s:.1f} s) -> {out / 'results.json'}")
        if result.rejected:
            print(f"  {result.rejected}")
    return 0


def _require_spec(assignment_id: str, root: Path) -> Assignment:
    """The assignment's spec, loaded (cheap: no torch, no oracles), or the user's error raised now; the spec's
    load notes are printed."""
    spec = require_folder(root) / assignment_id / "assignment.toml"
    if not spec.is_file():
        raise AssignmentNotFound(assignment_id, root, list_assignment_ids(root))
    return _print_load_notes(load_assignment(spec))


def _find_assignment(assignment_id: str, root: Path) -> Assignment:
    """find_assignment, with the spec's load notes (older keys, accepted) printed to stderr."""
    return _print_load_notes(find_assignment(assignment_id, root))


def _print_load_notes(assignment: Assignment) -> Assignment:
    for note in assignment.load_notes:
        print(f"grader: note: {note}", file=sys.stderr)
    return assignment


def cmd_check(args: argparse.Namespace, root: Path) -> int:
    path = _submission(args.submission)
    calibration = calibration_store(args)
    early = _early_sandbox(args.assignment, path, root, args.backend, (), calibration)
    from grader.operations.interactive import resolve_assignment, run_check
    from grader.publishing import report
    from grader.publishing.files import write_outputs

    try:
        assignment = resolve_assignment(args.assignment, path, root)
    except BaseException:
        if early is not None:
            early.close()
        raise
    backend = detect_backend(args.backend)
    result, pytest_report = run_check(path, assignment, backend, args.seed, tuple(args.target), calibration,
                                      sandbox=_adopt(early, backend))
    print(report.terminal(result, assignment))
    if args.out:
        write_outputs(args.out, result, assignment, pytest_report)
        print(f"reports written to {args.out}")
    return 0 if result.score == result.max_score else 1


def cmd_selftest(args: argparse.Namespace, root: Path) -> int:
    from grader.operations.selftest import format_table, run_selftest

    assignment = _find_assignment(args.assignment, root)
    backend = detect_backend(args.backend)
    seed = args.seed if args.seed is not None else fresh_seed()
    if args.seeds < 1:
        raise UsageError(f"--seeds must be >= 1, got {args.seeds}")
    rows = run_selftest(assignment, backend, seed, jobs=args.jobs, out=args.out, seeds=args.seeds, only=args.only)
    seeds = f"seed {seed}" if args.seeds == 1 else f"seeds {seed}..{seed + args.seeds - 1}"
    print(f"selftest {assignment.id} on {backend}, {seeds}")
    print(format_table(rows))
    return 0 if rows and all(r.ok for r in rows) else 1


def cmd_mutant(args: argparse.Namespace, root: Path) -> int:
    from grader.operations.selftest import reference_path

    assignment = _find_assignment(args.assignment, root)
    mutants = {m.id: m for m in load_mutants(assignment.reference_dir)}
    if args.list:
        if args.ids or args.all or args.write or args.diff:
            raise UsageError("--list takes no mutant ids, --all, --write or --diff")
        print(f"{assignment.id}: {len(mutants)} mutants and variants (id, kind, [expected traps], mistake)")
        print(_mutant_table(list(mutants.values())))
        return 0
    if bool(args.ids) == args.all or not (args.write or args.diff):
        raise UsageError("name mutant ids (or --all) with --write DIR and/or --diff, or use --list")
    ids = list(mutants) if args.all else args.ids
    unknown = [i for i in ids if i not in mutants]
    if unknown:
        raise UsageError(f"no mutant {unknown[0]!r} in {assignment.id} (known: {', '.join(mutants)})")
    path = reference_path(assignment)
    text = path.read_text(encoding="utf-8")
    for mutant_id in ids:  # every patch applies before anything is written
        mutants[mutant_id].source(text, str(path))
    for mutant_id in ids:
        mutant = mutants[mutant_id]
        if args.diff:
            print(mutant.diff(text, reference_name=path.name), end="")
        if args.write:
            written = write_mutant(mutant, text, args.write, f"{mutant.id}.py", reference_name=str(path))
            print(f"wrote {written}  (expect: {_traps_text(mutant)})")
    return 0


def _mutant_table(mutants: list[Mutant]) -> str:
    width = max((len(m.id) for m in mutants), default=0)
    return "\n".join(f"  {m.id:{width}}  {m.kind:7}  [{_traps_text(m)}]  {m.mistake}" for m in mutants)


def _traps_text(mutant: Mutant) -> str:
    text = ", ".join(mutant.traps) or "none"
    return text + "".join(f" ({backend}: {', '.join(t) or 'none'})" for backend, t in mutant.overrides)


def cmd_new_assignment(args: argparse.Namespace, root: Path) -> int:
    from grader.authoring.scaffold import ScaffoldError, write_scaffold

    try:
        folders = write_scaffold(root, args.id)
    except ScaffoldError as exc:
        raise UsageError(str(exc)) from None
    _find_assignment(args.id, root)  # validates as written
    written = "\n".join(f"  {folder}" for folder in folders)
    print(f"wrote a row-sum assignment to start from (contract, reference and mutant, student template):\n"
          f"{written}\ncheck it with\n  grader margins --assignment {args.id} --assignments {root}\n"
          f"  grader selftest --assignment {args.id} --seeds 3 --assignments {root}")
    return 0


def cmd_list(root: Path) -> int:
    ids = list_assignment_ids(require_folder(root))
    if not ids:
        print(f"no assignments under {root}")
        return 1
    for assignment_id in ids:
        a = _find_assignment(assignment_id, root)
        print(f"{a.id}: {a.title}  ({a.max_score:g} points, {len(a.cases)} cases)")
        for target in a.targets:
            points = sum(c.points for c in a.cases if c.target == target)
            kind = "kernel  " if target in a.kernels else "function"
            print(f"  {kind} {target:28} {points:g} points")
        for perf in a.performance:  # timed on CUDA only
            worth = f"up to {perf.max_score:g} points" if perf.thresholds else "leaderboard only"
            print(f"  timed    {perf.target:28} {perf.shape} {perf.dtype} ({worth})")
    return 0


# ------------------------------------------------------------------------------------------- batch, bundle


def _add_batch_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    b = sub.add_parser("batch", help="grade a whole class: gradebook, class report; resumable")
    b.add_argument("submissions", type=Path,
                   help="folder of .py files or of per-student folders, a .zip of either, "
                        "or a Gradescope export")
    b.add_argument("--assignment", required=True, help=ASSIGNMENT_HELP)
    b.add_argument("--out", required=True, type=Path, help="output folder (one subfolder per student)")
    b.add_argument("--workers", type=int,
                   help="grades at a time (default: what the CPUs, memory and GPUs hold)")
    b.add_argument("--force", action="store_true",
                   help="regrade everyone, also students that already have a current result")
    b.add_argument("--executor", choices=tuple(EXECUTORS), default="local",
                   help="where grades run: local (processes on this machine; the default) or ray (a Ray cluster)")
    b.add_argument("--ray-address", help="Ray cluster to use (default: start a local Ray instance)")
    b.add_argument("--gpus-per-task", type=float,
                   help="Ray on CUDA: share of a GPU per grade (default 0.25)")
    b.add_argument("--grade-timeout", type=float,
                   help="wall-clock limit per submission in seconds (default: far above the grader's own)")
    b.add_argument("--canvas-column",
                   help="canvas.csv's assignment column, Canvas's 'Name (assignment id)', e.g. "
                        "'Fused layers (12345)' (default: the assignment's title)")
    b.add_argument("--roster", type=Path, metavar="FILE",
                   help="the class list: Canvas's gradebook export (Grades > Export: Student, ID, SIS User ID, SIS "
                        "Login ID, Section), or a CSV of two columns, file stem or email -> SIS User ID; canvas.csv "
                        "then names each student as Canvas does, and the gradebook lists roster students without a "
                        "submission as missing")
    b.add_argument("--allowed", type=Path, action="append", default=[], metavar="FILE",
                   help="code students may share beyond the template (a tutorial, lecture code; a file or a folder; "
                        "repeatable): similarity.html discounts it")
    b.add_argument("--missing-score", type=float, metavar="POINTS",
                   help="canvas.csv's score for a student without a gradable file (default: none: left out of "
                        "canvas.csv, so Canvas keeps the grade it has)")
    _common(b)
    _calibration(b)

    y = sub.add_parser("similarity", help="rank pairs of submissions by the code they share beyond the template "
                                          "(similarity.csv, similarity.html); informational, grades nothing")
    y.add_argument("submissions", type=Path,
                   help="folder of .py files or of per-student folders, a .zip of either, or a Gradescope export")
    y.add_argument("--assignment", required=True, help=ASSIGNMENT_HELP)
    y.add_argument("--out", required=True, type=Path, help="folder to write similarity.csv and similarity.html to")
    y.add_argument("--allowed", type=Path, action="append", default=[], metavar="FILE",
                   help="code students may share beyond the template (a file or a folder; repeatable)")

    z = sub.add_parser("gradescope-bundle", help="write a Gradescope autograder zip for an assignment")
    z.add_argument("--assignment", required=True, help=ASSIGNMENT_HELP)
    z.add_argument("--out", required=True, type=Path, help="the zip to write, e.g. autograder.zip")
    z.add_argument("--torch", choices=("cpu", "cuda"), default="cpu",
                   help="torch build setup.sh installs (Gradescope's machines have no GPU: cpu)")
    z.add_argument("--torch-version", default="2.13.0",
                   help="the torch version setup.sh installs (default 2.13.0)")
    z.add_argument("--seed", type=int,
                   help="grade every submission with this seed (default: the course's seed, reference/course-seed.toml;"
                        " kept in bundle.json, which only root reads on Gradescope)")

    w = sub.add_parser("classroom-workflow", help="write a GitHub Classroom autograding workflow for an assignment")
    w.add_argument("--assignment", required=True, help=ASSIGNMENT_HELP)
    w.add_argument("--out", type=Path, default=Path(".github/workflows/classroom.yml"),
                   help="the workflow file to write (default: .github/workflows/classroom.yml)")
    w.add_argument("--grader-repo", metavar="OWNER/NAME",
                   help="the GitHub repository of kernel-grader the workflow pip-installs (students can read it: "
                        "it must hold no reference/ and no hidden cases); required unless this grader was "
                        "pip-installed from one")
    w.add_argument("--submission", help="the file students commit (default: the assignment's submission file)")
    w.add_argument("--timeout", type=int, default=10, help="minutes per target step (default 10)")
    s = sub.add_parser("student-bundle",
                       help="write the zip for students: template, assignment text and the public cases only")
    s.add_argument("--assignment", required=True, help=ASSIGNMENT_HELP)
    s.add_argument("--out", required=True, type=Path, help="the zip to write, e.g. softmax-student.zip")


def cmd_batch(args: argparse.Namespace, root: Path) -> int:
    from grader.operations.batch import BatchError, BatchOptions, format_summary, run_batch
    from grader.operations.executors import ExecutorUnavailable

    assignment = _find_assignment(args.assignment, root)
    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers must be at least 1")
    if args.missing_score is not None and args.missing_score < 0:
        raise UsageError("--missing-score must not be negative")
    _require_files(args.allowed, "--allowed")
    options = BatchOptions(
        submissions=args.submissions, assignment=assignment, assignments_root=root, out=args.out,
        backend=detect_backend(args.backend), seed=args.seed, workers=args.workers, force=args.force,
        executor=args.executor, ray_address=args.ray_address, gpus_per_task=args.gpus_per_task,
        grade_timeout_s=args.grade_timeout, canvas_column=args.canvas_column, calibration=calibration_store(args),
        roster=args.roster, missing_score=args.missing_score, allowed=tuple(args.allowed),
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

    assignment = _require_spec(args.assignment, root)  # the spec alone: nothing is graded
    _require_files(args.allowed, "--allowed")
    try:
        comparison, paths = run_similarity(args.submissions, assignment, args.out, tuple(args.allowed))
    except BatchError as exc:
        raise UsageError(str(exc)) from None
    print(f"{len(comparison.documents)} submissions, {len(comparison.pairs)} pairs sharing code beyond the template, "
          f"{len(comparison.flagged)} flagged:")
    for pair in comparison.pairs[:10]:
        print(f"  {pair.score:.2f}  {pair.a}  {pair.b}{'  flagged' if pair.flagged else ''}")
    for path in paths:
        print(f"  {path}")
    return 0


def cmd_gradescope_bundle(args: argparse.Namespace, root: Path) -> int:
    from grader.operations.bundle import BundleError, BundleOptions, write_bundle

    assignment = _find_assignment(args.assignment, root)
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
    assignment = _find_assignment(args.assignment, root)
    steps = classroom_steps(assignment, args.submission)
    if not steps:
        raise UsageError(f"{assignment.id} has no public cases: a GitHub Classroom workflow would grade nothing")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, classroom_workflow(assignment, grader_repo, args.submission, args.timeout))
    points = sum(s.points for s in steps)
    print(f"wrote {args.out}: {len(steps)} autograding steps, {points:g} points: the public cases, on the CPU "
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

    assignment = _find_assignment(args.assignment, root)
    try:
        path = write_student_bundle(assignment, args.out)
    except StudentBundleError as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote {path}: students unzip it and run, in the folder {assignment.id}/,\n"
          f"  grader check {assignment.submission_file} --assignments assignments")
    return 0


def cmd_course_seed(args: argparse.Namespace, root: Path) -> int:
    """The course folder's grading seed (grader.authoring.course_seed): shown, created, or rotated."""
    course = require_folder(root).resolve().parent
    if args.rotate:
        seed, created = rotate_course_seed(course), False
    else:
        seed, created = ensure_course_seed(course)
    verb = "rotated: later grades draw other inputs;" if args.rotate else ("created" if created else "is")
    print(f"course seed {seed.fingerprint} {verb} {seed.path}" + (f" (created {seed.created})" if seed.created else ""))
    if args.show:
        print(seed.seed)
    return 0


def cmd_margins(args: argparse.Namespace, root: Path) -> int:
    """Exit 1 when a case's verdict for some predicted mistake depends on the draw (grader.operations.margins)."""
    from grader.operations.margins import DEPENDS, audit, format_margins

    if args.seeds < 1:
        raise UsageError(f"--seeds must be >= 1, got {args.seeds}")
    assignment = find_assignment(args.assignment, root)
    depends = 0
    for backend in args.backend or ("interpreter", "cuda"):
        margins = audit(assignment, backend, range(args.seeds))
        depends += sum(m.verdict == DEPENDS for m in margins)
        print(f"{assignment.id} on {backend}, seeds 0..{args.seeds - 1}:")
        print(format_margins(margins, everything=args.all))
    return 1 if depends else 0
