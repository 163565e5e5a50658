"""One assignment's commands: grade files on the full battery, check one on the public cases, the selftest and its
corpus (`mutant`), `margins`, `list`, `new-assignment` and the course's seed. Each builds its request from the
parsed arguments, hands it to grader.operations, and prints what came back."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.authoring.course_seed import ensure_course_seed, rotate_course_seed
from grader.authoring.discovery import find_assignment, list_assignment_ids, load_spec, require_folder
from grader.authoring.mutants import Mutant, load_mutants, write_mutant
from grader.authoring.spec import Assignment
from grader.backends import detect_backend
from grader.cli.parser import calibration_settings
from grader.operations.requests import CheckFile, GradeFiles, UsageError
from grader.publishing.plurals import counted
from grader.seeds import fresh_seed

# Imported where used, not here: grader.operations.grade, .interactive, grader.publishing.report and .files
# import torch (seconds), and `grade` / `check` start the submission's sandbox before that
# (grader.operations.early_start).


def cmd_grade(args: argparse.Namespace, root: Path) -> int:
    from grader.operations.grade_files import grade_files

    request = GradeFiles(assignments_root=root, assignment_id=args.assignment, submissions=tuple(args.submissions),
                         out=args.out, backend=args.backend, seed=args.seed, sanitize=args.sanitize,
                         profile=args.profile, prairielearn=args.prairielearn, calibration=calibration_settings(args))
    for graded in grade_files(request, note=lambda text: print(f"grader: {text}", file=sys.stderr)):
        result = graded.result
        traps = ", ".join(result.traps) or "none"
        print(f"{graded.path.name}: {result.score:g} / {result.max_score:g}  traps: {traps}  "
              f"({result.execution_time_s:.1f} s) -> {graded.out / 'results.json'}")
        if result.rejected:
            print(f"  {result.rejected}")
    return 0


def cmd_check(args: argparse.Namespace, root: Path) -> int:
    from grader.operations.check_file import check_file

    checked = check_file(CheckFile(assignments_root=root, submission=args.submission, assignment_id=args.assignment,
                                   targets=tuple(args.target), out=args.out, backend=args.backend, seed=args.seed,
                                   calibration=calibration_settings(args), timed=args.timed or args.profile,
                                   profile=args.profile),
                         go=(lambda: bool(sys.stdin.readline())) if args.wait_for_go else None)
    if checked is None:  # a warm check's held process, let go without a check
        return 0
    from grader.publishing import report

    print(report.terminal(checked.result, checked.assignment, verbose=args.verbose,
                          written_to=str(args.out) if args.out else ""))
    if args.out:
        print(f"reports written to {args.out}")
    return 0 if checked.result.score == checked.result.max_score else 1


def require_spec(assignment_id: str, root: Path) -> Assignment:
    """The assignment's spec, loaded (cheap: no torch, no oracles), or the user's error raised now; the spec's
    load notes are printed."""
    return _print_load_notes(load_spec(assignment_id, root))


def find_assignment_noting(assignment_id: str, root: Path) -> Assignment:
    """find_assignment, with the spec's load notes (older keys, accepted) printed to stderr."""
    return _print_load_notes(find_assignment(assignment_id, root))


def _print_load_notes(assignment: Assignment) -> Assignment:
    for note in assignment.load_notes:
        print(f"grader: note: {note}", file=sys.stderr)
    return assignment


def cmd_selftest(args: argparse.Namespace, root: Path) -> int:
    from grader.operations.selftest import format_table, run_selftest

    assignment = find_assignment_noting(args.assignment, root)
    backend = detect_backend(args.backend)
    seed = args.seed if args.seed is not None else fresh_seed()
    if args.seeds < 1:
        raise UsageError(f"--seeds must be >= 1, got {args.seeds}")
    if args.timed and not backend.on_gpu:
        raise UsageError("--timed needs a CUDA GPU (--backend cuda): the interpreter times nothing")
    rows = run_selftest(assignment, backend, seed, jobs=args.jobs, out=args.out, seeds=args.seeds, only=args.only,
                        timed=args.timed)
    seeds = f"seed {seed}" if args.seeds == 1 else f"seeds {seed}..{seed + args.seeds - 1}"
    print(f"selftest {assignment.id} on {backend}, {seeds}")
    print(format_table(rows))
    return 0 if rows and all(r.ok for r in rows) else 1


def cmd_mutant(args: argparse.Namespace, root: Path) -> int:
    from grader.operations.selftest import reference_path

    assignment = find_assignment_noting(args.assignment, root)
    mutants = {m.id: m for m in load_mutants(assignment.reference_dir)}
    if args.list:
        if args.ids or args.all or args.write or args.diff:
            raise UsageError("--list takes no mutant ids, --all, --write or --diff")
        corpus = counted(len(mutants), "mutant or variant", "mutants and variants")
        print(f"{assignment.id}: {corpus} (id, kind, [expected traps], mistake)")
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
    find_assignment_noting(args.id, root)  # validates as written
    written = "\n".join(f"  {folder}" for folder in folders)
    print(f"wrote a row-sum assignment to start from (contract, reference and mutant, student template):\n"
          f"{written}\ncheck it with\n  grader margins --assignment {args.id} --assignments {root}\n"
          f"  grader selftest --assignment {args.id} --seeds 3 --assignments {root}")
    return 0


def cmd_list(args: argparse.Namespace, root: Path) -> int:
    ids = list_assignment_ids(require_folder(root))
    if not ids:
        print(f"no assignments under {root}")
        return 1
    for assignment_id in ids:
        a = find_assignment_noting(assignment_id, root)
        print(f"{a.id}: {a.title}  ({counted(a.max_score, 'point')}, {counted(len(a.cases), 'case')})")
        for target in a.targets:
            points = sum(c.points for c in a.cases if c.target == target)
            kind = "kernel  " if target in a.kernels else "function"
            print(f"  {kind} {target:28} {counted(points, 'point')}")
        for perf in a.performance:  # timed on CUDA only
            worth = f"up to {counted(perf.max_score, 'point')}" if perf.thresholds else "leaderboard only"
            print(f"  timed    {perf.target:28} {perf.shape} {perf.dtype} ({worth})")
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
