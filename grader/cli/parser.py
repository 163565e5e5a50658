"""The command line's grammar: every subcommand, its options and their help (argparse). Parsing only: what a
command does is grader.cli.grading's and grader.cli.course's."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from grader.cli.typos import CommandParser
from grader.environment import grader_version
from grader.operations.executors import EXECUTORS
from grader.operations.requests import CalibrationSettings
from grader.running.timing.calibration import DEFAULT_MAX_AGE_S

DEFAULT_MAX_AGE_H = DEFAULT_MAX_AGE_S / 3600
ASSIGNMENTS_HELP = ("folder of assignments (default: $GRADER_ASSIGNMENTS, else the checkout's assignments/, "
                    "else the examples shipped with the package)")
ASSIGNMENT_HELP = "the assignment's id: its folder under the assignments folder (`grader list` shows them)"
# --seed, for whoever reads it: an instructor grading (the course's seed), a student checking (who never has the
# course's), the selftest (a fresh one).
GRADE_SEED_HELP = ("input seed (default: the course's seed, reference/course-seed.toml, created once); recorded in "
                   "the results, so the same file always gets the same grade")
CHECK_SEED_HELP = ("input seed (default: the assignment's public seed, the same for everyone); recorded in the "
                   "results, so the same file always gets the same result")
SELFTEST_SEED_HELP = "input seed (default: a new one each run, printed with the table)"


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="grader", description="Autograder for Triton kernel assignments.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {grader_version()}",
                        help="print the grader's version and exit")
    parser.add_argument("--assignments", help=ASSIGNMENTS_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")

    g = _command(sub, "grade", "grade submissions on the full battery; write results",
                 "Grade submissions on the full battery (hidden cases too) and write each one's results and reports.")
    g.add_argument("submissions", nargs="+", type=Path,
                   help="the files to grade (.py or .ipynb), each graded on its own")
    g.add_argument("--assignment", required=True, help=ASSIGNMENT_HELP)
    g.add_argument("--out", required=True, type=Path,
                   help="output folder; with several submissions, one subfolder per submission (file stem)")
    g.add_argument("--sanitize", action="store_true",
                   help="CUDA: run every kernel case once more under compute-sanitizer memcheck (slow)")
    g.add_argument("--no-profile", dest="profile", action="store_false",
                   help="CUDA: do not replay the timed cases under Nsight Compute (no measured 'why slow')")
    g.add_argument("--prairielearn", action="store_true",
                   help="also write prairielearn.json, PrairieLearn's external-grader results "
                        "(copy it to /grade/results/results.json)")
    _common(g)
    _calibration(g)

    c = _command(sub, "check", "run the public cases on your file; explain failures",
                 "Run the public cases on your file and explain every failure: what went wrong, where, and how to "
                 "fix it.")
    c.add_argument("submission", type=Path, help="your file (.py or .ipynb)")
    c.add_argument("--assignment", help="default: the assignment whose submission file has this name")
    c.add_argument("--out", type=Path, help="also write results and reports here")
    c.add_argument("--target", action="append", default=[],
                   help="only this kernel's or function's cases (repeatable); exit 0 iff they all pass")
    c.add_argument("-v", "--verbose", action="store_true",
                   help="print every failing case in full, with every error map (by default a case that failed "
                        "the same way as one above is one line)")
    c.add_argument("--timed", action="store_true",
                   help="CUDA: also time the performance cases against the reference (seconds more; `grader grade` "
                        "always does)")
    c.add_argument("--profile", action="store_true",
                   help="CUDA, with --timed: also replay the timed cases under Nsight Compute and say why a kernel "
                        "is slow (seconds more; `grader grade` always does)")
    c.add_argument("--warm", action="store_true",
                   help="keep a check process ready for the next `grader check --warm` of this file with these "
                        "arguments (it skips the seconds of imports; stops after 20 minutes unused)")
    c.add_argument("--wait-for-go", action="store_true", help=argparse.SUPPRESS)  # a warm check's held process
    _common(c, seed_help=CHECK_SEED_HELP)
    _calibration(c)

    s = _command(sub, "selftest", "check the grader on the reference and its mutants",
                 "Grade the reference and the mutant corpus; fail on any misdiagnosis.")
    s.add_argument("--assignment", required=True, help=ASSIGNMENT_HELP)
    s.add_argument("--jobs", type=int, default=1, help="submissions graded at a time (default 1)")
    s.add_argument("--out", type=Path, help="also write each submission's results and reports here")
    s.add_argument("--seeds", type=int, default=1, metavar="N",
                   help="grade each submission at N seeds (--seed and the N-1 after it); a score or trap that "
                        "changes with the seed is a MISS (default 1)")
    s.add_argument("--timed", action="store_true",
                   help="CUDA: time and profile the performance cases too, and check the traps each submission "
                        "must measure (mutants.toml's performance_traps_cuda)")
    s.add_argument("--only", action="append", default=None, metavar="ID",
                   help="grade only this submission of the corpus (repeatable; see `grader mutant --list`)")
    _common(s, seed_help=SELFTEST_SEED_HELP)

    r = _command(sub, "margins", "which cases' verdicts depend on the drawn inputs",
                 "Does a case's verdict depend on the draw? Every trap's predicted output against each case's "
                 "tolerance, at many seeds (no kernel runs).")
    r.add_argument("--assignment", required=True, help=ASSIGNMENT_HELP)
    r.add_argument("--seeds", type=int, default=40, metavar="N", help="seeds 0..N-1 (default 40)")
    r.add_argument("--backend", choices=("interpreter", "cuda"), action="append",
                   help="the tolerances of this backend (repeatable; default both)")
    r.add_argument("--all", action="store_true", help="list every (case, trap), not only those that depend")

    m = _command(sub, "mutant", "write out, diff or list an assignment's mutants",
                 "Write out, diff or list an assignment's mutants (the selftest's corpus).")
    m.add_argument("ids", nargs="*", metavar="ID", help="mutant ids (see --list)")
    m.add_argument("--assignment", required=True, help=ASSIGNMENT_HELP)
    m.add_argument("--write", type=Path, metavar="DIR", help="write each mutant as the submission DIR/<id>.py")
    m.add_argument("--diff", action="store_true", help="print each mutant's unified diff against the reference")
    m.add_argument("--all", action="store_true", help="every mutant and variant of the assignment")
    m.add_argument("--list", action="store_true", help="list the mutants with their traps and mistakes")

    _command(sub, "list", "list the assignments with their targets and points",
             "List the assignments with their kernels, functions and points.")
    n = _command(sub, "new-assignment", "start a new assignment folder from a working example",
                 "Write a new assignment folder to start from (it validates and passes its selftest).")
    n.add_argument("id", help="the new assignment's id: its folder and submission file name")
    k = _command(sub, "course-seed", "show or rotate the course's grading seed",
                 "Show or rotate the course's grading seed (reference/course-seed.toml).")
    k.add_argument("--rotate", action="store_true",
                   help="replace it with a new one: later grades draw other inputs (a batch regrades its students)")
    k.add_argument("--show", action="store_true", help="print the seed itself (it is as secret as the reference)")
    _add_batch_parsers(sub)
    for command in sub.choices.values():  # accepted after the subcommand too, where users type it
        command.add_argument("--assignments", default=argparse.SUPPRESS, help=ASSIGNMENTS_HELP)
    return parser


def _command(sub: Any, name: str, summary: str, description: str) -> argparse.ArgumentParser:
    """A subcommand: `summary` is its line in `grader --help` (one line at 80 columns), `description` heads its own
    --help."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=summary, description=description)
    return parser


def _common(p: argparse.ArgumentParser, seed_help: str = GRADE_SEED_HELP) -> None:
    p.add_argument("--backend", choices=("auto", "interpreter", "cuda"), default="auto",
                   help="where kernels run: cuda (a GPU), interpreter (Triton's CPU interpreter), or auto "
                        "(cuda when a GPU is usable; the default)")
    p.add_argument("--seed", type=int, help=seed_help)


def _calibration(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calibration-dir", type=Path, metavar="DIR",
                   help="where performance cases' bars (reference and torch eager timings) are cached across "
                        "runs (default: $GRADER_CACHE_DIR/calibration, else $XDG_CACHE_HOME/kernel-grader/"
                        "calibration, else ~/.cache/kernel-grader/calibration)")
    p.add_argument("--recalibrate", action="store_true",
                   help="measure the bars again instead of using cached ones (later grades of this run reuse them)")
    p.add_argument("--calibration-max-age", type=float, metavar="HOURS", default=DEFAULT_MAX_AGE_H,
                   help=f"cached bars older than this are measured again (default {DEFAULT_MAX_AGE_H:g})")


def calibration_settings(args: argparse.Namespace) -> CalibrationSettings:
    """The bars' cache settings the calibration options name (UsageError for a negative age)."""
    return CalibrationSettings(folder=args.calibration_dir, max_age_s=args.calibration_max_age * 3600,
                               recalibrate=args.recalibrate)


def _add_batch_parsers(sub: Any) -> None:
    b = _command(sub, "batch", "grade a whole class: gradebook and class report",
                 "Grade a whole class: each student's results, the gradebook, canvas.csv and the class report; "
                 "resumable (a rerun grades only what changed).")
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
    b.add_argument("--no-profile", dest="profile", action="store_false",
                   help="CUDA: no replay of the timed cases under Nsight Compute (no measured 'why slow')")
    b.add_argument("--profile-every-case", action="store_true",
                   help="CUDA: read Nsight Compute's counters for every timed case (default: only where the student "
                        "is measurably slower than the reference, the only cases where they can name a trap; a "
                        "profiled replay holds the GPU alone)")
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

    y = _command(sub, "similarity", "rank pairs of submissions by the code they share",
                 "Rank pairs of submissions by the code they share beyond the template (similarity.csv, "
                 "similarity.html); informational, grades nothing.")
    y.add_argument("submissions", type=Path,
                   help="folder of .py files or of per-student folders, a .zip of either, or a Gradescope export")
    y.add_argument("--assignment", required=True, help=ASSIGNMENT_HELP)
    y.add_argument("--out", required=True, type=Path, help="folder to write similarity.csv and similarity.html to")
    y.add_argument("--allowed", type=Path, action="append", default=[], metavar="FILE",
                   help="code students may share beyond the template (a file or a folder; repeatable)")

    z = _command(sub, "gradescope-bundle", "write a Gradescope autograder zip",
                 "Write a Gradescope autograder zip for an assignment.")
    z.add_argument("--assignment", required=True, help=ASSIGNMENT_HELP)
    z.add_argument("--out", required=True, type=Path, help="the zip to write, e.g. autograder.zip")
    z.add_argument("--torch", choices=("cpu", "cuda"), default="cpu",
                   help="torch build setup.sh installs (Gradescope's machines have no GPU: cpu)")
    z.add_argument("--torch-version", default="2.13.0",
                   help="the torch version setup.sh installs (default 2.13.0)")
    z.add_argument("--seed", type=int,
                   help="grade every submission with this seed (default: the course's seed, reference/course-seed.toml;"
                        " kept in bundle.json, which only root reads on Gradescope)")

    w = _command(sub, "classroom-workflow", "write a GitHub Classroom autograding workflow",
                 "Write a GitHub Classroom autograding workflow for an assignment.")
    w.add_argument("--assignment", required=True, help=ASSIGNMENT_HELP)
    w.add_argument("--out", type=Path, default=Path(".github/workflows/classroom.yml"),
                   help="the workflow file to write (default: .github/workflows/classroom.yml)")
    w.add_argument("--grader-repo", metavar="OWNER/NAME",
                   help="the GitHub repository of kernel-grader the workflow pip-installs (students can read it: "
                        "it must hold no reference/ and no hidden cases); required unless this grader was "
                        "pip-installed from one")
    w.add_argument("--submission", help="the file students commit (default: the assignment's submission file)")
    w.add_argument("--timeout", type=int, default=10, help="minutes per target step (default 10)")
    s = _command(sub, "student-bundle", "write the students' zip: template, text, public cases",
                 "Write the zip for students: the template, the assignment's text and the public cases only.")
    s.add_argument("--assignment", required=True, help=ASSIGNMENT_HELP)
    s.add_argument("--out", required=True, type=Path, help="the zip to write, e.g. softmax-student.zip")
