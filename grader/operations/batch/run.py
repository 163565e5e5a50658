"""One `grader batch` run: find the submissions, settle the manifest, grade what is not current through an
executor (committing and logging each result as it comes), then rebuild the class's files."""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from grader.authoring.course_seed import COURSE, GIVEN, ensure_course_seed, fingerprint, read_course_seed
from grader.authoring.spec import Assignment
from grader.backends import Backend
from grader.operations.batch.commits import commit
from grader.operations.batch.event_log import EventLog, iso, now
from grader.operations.batch.folder import BATCH_FORMAT_VERSION, EVENT_LOG, SCRATCH, BatchError, locked, read_json
from grader.operations.batch.gradebook import CanvasOptions, write_class_files
from grader.operations.batch.manifest import (
    CanvasSettings,
    Manifest,
    keep_canvas_settings,
    kept_canvas_settings,
    result_state,
    settle_canvas_settings,
    settle_manifest,
)
from grader.operations.batch.progress import Progress
from grader.operations.batch.roster import Roster, identified, read_roster
from grader.operations.batch.signals import Interrupts, catching_interrupts, interrupt_point
from grader.operations.batch.submissions import Submission, discover_submissions
from grader.operations.executors import EXECUTORS, Executor, ExecutorSettings, GradeJob, JobOutcome
from grader.publishing.gradebook import max_points
from grader.publishing.people import Student
from grader.publishing.plurals import counted
from grader.publishing.similarity import SimilaritySummary
from grader.publishing.similarity import summary as similarity_summary
from grader.running.processes.cpu_share import MAX_STRETCH
from grader.running.timing.calibration import CalibrationStore


@dataclass(frozen=True)
class BatchOptions:
    submissions: Path
    assignment: Assignment
    assignments_root: Path
    out: Path
    backend: Backend
    seed: int | None = None
    workers: int | None = None
    force: bool = False
    executor: str = "local"  # a name in grader.operations.executors.EXECUTORS
    ray_address: str | None = None
    gpus_per_task: float | None = None  # Ray, CUDA only; default 1 / executors.GRADES_PER_GPU
    grade_timeout_s: float | None = None
    canvas_column: str | None = None  # canvas.csv's assignment column, e.g. "Fused layers (12345)"; None: DIR's
    calibration: CalibrationStore | None = None  # where the bars are cached; None: each grade measures its own
    roster: Path | None = None  # the course's roster, Canvas's export or a map (batch/roster.py); None: DIR's
    allowed: tuple[Path, ...] = ()  # sources students may share beyond the template (similarity discounts them)
    missing_score: float | None = None  # canvas.csv's score for a student without a gradable file; None: DIR's
    profile: bool = True  # CUDA: each grade replays its timed cases once under Nsight Compute
    # ... every timed case (True), or only those whose counters could name a trap (the default: within 10% of the
    # reference no trap is named, and a profiled replay holds the GPU alone, the class's bottleneck)
    profile_every_case: bool = False

@dataclass
class BatchSummary:
    students: int = 0
    skipped: int = 0
    graded: int = 0
    failed: int = 0
    no_submission: int = 0
    interrupted: bool = False
    seed: int = 0
    wall_s: float = 0.0
    files: list[Path] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

def default_grade_timeout(assignment: Assignment, backend: Backend) -> float:
    """A safety net far above what the grader's own limits allow (every case hanging, every restart, each deadline
    stretched as far as a busy machine may stretch it: cpu_share.MAX_STRETCH)."""
    cases = len(assignment.cases_for(backend)) + len(assignment.kernels)
    return (MAX_STRETCH + 1) * (assignment.import_timeout_s + cases * (assignment.call_timeout_s + 10)) + 600

def make_executor(options: BatchOptions, scratch: Path) -> Executor:
    factory = EXECUTORS.get(options.executor)
    if factory is None:
        raise BatchError(f"unknown executor {options.executor!r} ({' or '.join(EXECUTORS)})")
    return factory(ExecutorSettings(options.backend, scratch, options.workers, options.ray_address,
                                    options.gpus_per_task))

def run_batch(options: BatchOptions, stream: IO[str] | None = None,
              new_seed: Callable[[], int] | None = None) -> BatchSummary:
    """Grade what is not graded yet, then rebuild the gradebook and class report from DIR.

    Ctrl-C or SIGTERM at any moment (see `Interrupts`) stops grading between two commits (before the
    first, if it came during discovery), ends the children and still writes the gradebook and class
    report whole from what DIR holds; one that comes while they are written lets them finish. The
    summary is then `interrupted` (the CLI exits 130, so a script or shell loop stops as asked), also
    when the signal came after the last grade: the gradebook is complete then, and the summary says that
    nothing is left to grade instead of asking for a re-run.
    """
    stream = stream or sys.stdout
    out = Path(options.out).resolve()
    started = time.monotonic()
    summary = BatchSummary()
    settings, changes, roster = _canvas_settings(out, options)  # a bad roster: before DIR is made
    with catching_interrupts() as interrupts, locked(out):
        scratch = out / SCRATCH
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        try:
            assignment = options.assignment
            submissions = discover_submissions(options.submissions, assignment.submission_file, scratch)
            manifest = settle_manifest(out, assignment.id, options.backend, options.seed, options.force,
                                       new_seed or (lambda: ensure_course_seed(assignment.course_root)[0].seed))
            keep_canvas_settings(out, settings)
            stream.writelines(f"{line}\n" for line in changes)
            warning = roster.points_warning(settings.column or assignment.title,
                                            max_points(assignment, manifest.backend)) if roster else None
            if warning:
                stream.write(f"{warning}\n")
            summary.seed = manifest.seed
            summary.students = len(submissions)
            todo = plan(out, submissions, manifest)
            summary.no_submission = sum(s.path is None for s in submissions)
            summary.skipped = len(submissions) - len(todo) - summary.no_submission
            try:
                _grade(options, manifest, todo, out, scratch, stream, summary, interrupts)
            except KeyboardInterrupt:
                summary.interrupted = True
            canvas = CanvasOptions(settings.column, roster, settings.missing_score)
            similar, similar_files = class_similarity(out, submissions, options, identified(submissions, roster))
            summary.files, summary.counts = write_class_files(out, submissions, options.assignment, manifest, canvas,
                                                               similar)
            summary.files += similar_files
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    summary.interrupted = summary.interrupted or interrupts.received
    summary.wall_s = round(time.monotonic() - started, 3)
    return summary

def _canvas_settings(out: Path, options: BatchOptions) -> tuple[CanvasSettings, list[str], Roster | None]:
    """This run's canvas.csv settings (given, else kept in DIR), a line for each given one that replaces a kept one,
    and the roster read. A first run without a column takes the roster's assignment column when the roster (a
    Canvas export) has exactly one, so the import updates that assignment; else the assignment's title."""
    given = CanvasSettings(options.canvas_column, options.roster, options.missing_score)
    kept = kept_canvas_settings(out)
    settings, changes = settle_canvas_settings(kept, given, options.assignment.title)
    roster = _roster(settings.roster, given.roster is None)
    if given.column is None and kept.column is None and roster is not None and roster.assignment_column:
        settings = replace(settings, column=roster.assignment_column)
    return settings, changes, roster


def _roster(path: Path | None, kept: bool) -> Roster | None:
    """The roster this run matches students with: given on the command line, or kept from an earlier run."""
    if path is None:
        return None
    try:
        return read_roster(path)
    except BatchError as exc:
        if not kept:
            raise
        raise BatchError(f"{exc} (the roster this folder's earlier runs used; pass --roster FILE)") from None

def class_similarity(out: Path, submissions: Sequence[Submission], options: BatchOptions,
                     people: Mapping[str, Student]) -> tuple[SimilaritySummary, list[Path]]:
    """similarity.csv and similarity.html beside the gradebook (informational), naming students as `people` does
    (the roster's identity). A failure here never costs the gradebook: the class report says why there is no
    similarity page."""
    from grader.operations.similarity import similarity_files  # it reads submissions as this package finds them

    links = {s.id: f"{s.id}/report.html" for s in submissions if (out / s.id / "report.html").is_file()}
    try:
        comparison, files = similarity_files(out, submissions, options.assignment, options.allowed, links, people)
    except Exception as exc:  # informational: the grades are written whatever happens here
        return SimilaritySummary(error=f"{type(exc).__name__}: {exc}"), []
    return similarity_summary(comparison), files

def plan(out: Path, submissions: Sequence[Submission], manifest: Manifest) -> list[Submission]:
    """The submissions to grade in this run: those with a file whose result is not current."""
    return [s for s in submissions
            if s.path is not None and result_state(out / s.id, manifest, s.sha256)[0] != "current"]

def hidden_from_students(submissions: Path, out: Path) -> tuple[str, ...]:
    """What student code must not see (the worker mounts empty folders over these when it can): the
    whole class's submissions (the folder, or the folder holding the zip) and the batch's output."""
    source = Path(submissions).resolve()
    return (str(source if source.is_dir() else source.parent), str(out))

def _grade(options: BatchOptions, manifest: Manifest, todo: Sequence[Submission], out: Path, scratch: Path,
           stream: IO[str], summary: BatchSummary, interrupts: Interrupts) -> None:
    if not todo:
        stream.write(f"nothing to grade: {summary.skipped} of {summary.students} already graded\n")
        return
    run = uuid.uuid4().hex[:12]
    log = EventLog(out / EVENT_LOG, run)
    progress = Progress(stream, len(todo))
    by_id = {s.id: s for s in todo}
    timeout = options.grade_timeout_s or default_grade_timeout(options.assignment, options.backend)
    executor = make_executor(options, scratch / "jobs")
    # Each grade's workers get a share of the GPU's memory, held by that grade's watchdog: no neighbour's
    # out-of-memory or timeout needs a second pass (grader.running.processes: gpu_memory, client).
    course = read_course_seed(options.assignment.course_root) if not options.assignment.public else None
    source = COURSE if course is not None and course.seed == manifest.seed else GIVEN
    jobs = [GradeJob(s.id, s.path, options.assignment.id, Path(options.assignments_root), options.backend,
                     manifest.seed, timeout, hidden_from_students(options.submissions, out),
                     calibration=options.calibration, concurrent_grades=executor.grades_per_gpu(), seed_source=source,
                     profile=options.profile, profile_every_case=options.profile_every_case)
            for s in todo if s.path is not None]
    log.write("run-start", executor=executor.describe(), to_grade=len(todo), seed=manifest.seed,
              backend=manifest.backend, generation=manifest.generation)
    seed_text = f"the course seed {fingerprint(manifest.seed)}" if source == COURSE else f"seed {manifest.seed}"
    progress.line(f"grading {len(todo)} of {counted(summary.students, 'submission')} ({summary.skipped} already "
                  f"graded, {summary.no_submission} without a file) on {executor.describe()}; {seed_text}")

    def on_start(job: GradeJob, device: str) -> None:
        log.write("start", student=job.student, device=device)

    interrupted = True
    try:
        with interrupts.allowed(), contextlib.closing(executor.run(jobs, on_start)) as outcomes:
            for n, outcome in enumerate(outcomes, 1):
                submission = by_id[outcome.student]
                record = _record(submission, manifest, outcome, run)
                with interrupts.held():  # a result, its log line and its count go together
                    commit(out, outcome, record)
                    interrupt_point(f"commit:{n}")
                    _log_and_count(outcome, out, log, progress, summary)
                interrupt_point(f"graded:{n}")
        interrupted = False
    finally:
        progress.close()
        log.write("run-end", interrupted=interrupted, graded=summary.graded, failed=summary.failed)
        log.close()

def _log_and_count(outcome: JobOutcome, out: Path, log: EventLog, progress: Progress,
                   summary: BatchSummary) -> None:
    if outcome.ok:
        log.write("graded", student=outcome.student, device=outcome.device, seconds=outcome.elapsed_s)
        summary.graded += 1
        progress.advance(_graded_line(out / outcome.student, outcome))
    else:
        log.write("failed", student=outcome.student, device=outcome.device, error=outcome.error[:2000])
        summary.failed += 1
        first = outcome.error.splitlines()[0] if outcome.error else "unknown error"
        progress.advance(f"{outcome.student}: GRADING FAILED: {first}", failed=True)

def _record(submission: Submission, manifest: Manifest, outcome: JobOutcome, run: str) -> dict[str, Any]:
    return {
        "format_version": BATCH_FORMAT_VERSION,
        "student": submission.id, "name": submission.student.name, "email": submission.student.email,
        "sid": submission.student.sid, "source": submission.source, "submission_sha256": submission.sha256,
        "generation": manifest.generation, "run": run, "seed": manifest.seed, "backend": manifest.backend,
        "device": outcome.device,
        "started_at": iso(outcome.started_at) if outcome.started_at else "",
        "finished_at": now(), "elapsed_s": outcome.elapsed_s,
    }

def _graded_line(folder: Path, outcome: JobOutcome) -> str:
    grade = read_json(folder / "grade.json") or {}
    traps = ", ".join(grade.get("traps", [])) or "none"
    where = f", GPU {outcome.device}" if outcome.device else ""
    return (f"{outcome.student}: {grade.get('score', 0):g} / {grade.get('max_score', 0):g}  traps: {traps}  "
            f"({outcome.elapsed_s:.1f} s{where})")

def format_summary(summary: BatchSummary, out: Path) -> str:
    counts = ", ".join(f"{n} {status}" for status, n in summary.counts.items() if n)
    head = "interrupted: " if summary.interrupted else ""
    lines = [f"{head}graded {summary.graded}, failed {summary.failed}, skipped {summary.skipped} "
             f"(already graded) in {summary.wall_s:.1f} s; gradebook: {counts or 'empty'}"]
    lines += [f"  {p}" for p in summary.files]
    if summary.interrupted and summary.counts.get("pending", 0) + summary.counts.get("outdated", 0):
        lines.append(f"re-run the same command to finish; nothing graded so far is graded again ({out})")
    elif summary.interrupted:
        lines.append(f"nothing is left to grade: the gradebook is complete ({out})")
    return "\n".join(lines)
