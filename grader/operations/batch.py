"""Grade a whole class: `grader batch SUBMISSIONS --assignment ID --out DIR`.

SUBMISSIONS is a folder of `.py` or `.ipynb` files (file stem = student id), a folder of folders (folder
name = student id; the file is the assignment's `submission_file`, else its notebook `<stem>.ipynb`, else
the folder's only `.py`, else its only notebook), a `.zip`
of either, or Gradescope's "export submissions" layout (folders plus `submission_metadata.yml`,
which adds the submitters' names, emails and student ids).

DIR holds one folder per student (results.json, grade.json, reports, batch-record.json), then
gradebook.json, gradebook.csv, canvas.csv (Canvas's gradebook import) and class_report.html, rebuilt
from those folders after every run.

Crash safety: a student's outputs are written into scratch space and the whole folder is renamed
into place, so `DIR/<student>/results.json` exists exactly when that student's grade is complete.
A run skips every student whose result is current (same seed, backend and grading generation, same
submission bytes) unless `--force`; killed at any moment (Ctrl-C, SIGTERM, SIGKILL) and re-run, it
loses nothing and grades nothing twice. Ctrl-C and SIGTERM also leave a gradebook that matches DIR
(see `run_batch`). `DIR/batch.json` records the seed, backend and generation;
`DIR/batch-log.jsonl` records every run's events (start, graded, failed) for audit.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import sys
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from grader.authoring.spec import Assignment
from grader.operations.executors import EXECUTORS, Executor, ExecutorSettings, GradeJob, JobOutcome
from grader.operations.notebook import NOTEBOOK_SUFFIX, is_notebook
from grader.publishing.atomic import write_json
from grader.publishing.gradebook import (
    Gradebook,
    GradebookRow,
    Student,
    class_stats,
    graded_row,
    target_points,
    ungraded_row,
    write_gradebook,
)
from grader.results import GradeResult
from grader.running.calibration import CalibrationStore
from grader.seeds import fresh_seed

BATCH_FORMAT_VERSION = 1
MANIFEST = "batch.json"
EVENT_LOG = "batch-log.jsonl"
RECORD = "batch-record.json"
ERROR = "error.json"
SCRATCH = ".scratch"
LOCK = ".batch.lock"
RESERVED = {MANIFEST, EVENT_LOG, "gradebook.json", "gradebook.csv", "canvas.csv", "class_report.html"}
GRADESCOPE_METADATA = "submission_metadata.yml"
IGNORED_NAMES = {"__MACOSX", "__pycache__"}
MAX_UNZIPPED_BYTES = 2 << 30


class BatchError(Exception):
    """A problem with the batch's inputs or output folder; the message is for the instructor."""


# ------------------------------------------------------------------------------------------- submissions


@dataclass(frozen=True)
class Submission:
    student: Student
    path: Path | None  # the file to grade; None when the student's folder holds none
    source: str  # where it was found, relative to SUBMISSIONS
    sha256: str = ""
    problem: str = ""  # why there is no file

    @property
    def id(self) -> str:
        return self.student.id


def student_id(raw: str) -> str:
    """A folder-safe id: letters, digits and `._@+-` kept, anything else `_`; no leading `.` or `-`."""
    cleaned = re.sub(r"[^A-Za-z0-9._@+-]", "_", raw.strip())
    return re.sub(r"^[.-]", "_", cleaned)


def read_gradescope_metadata(text: str) -> dict[str, list[dict[str, str]]]:
    """The submitters of each submission folder in Gradescope's `submission_metadata.yml`.

    A reader for just this file's shape (Ruby-style symbol keys; no full YAML needed):

        submission_123:
          :submitters:
          - :name: Jane Doe
            :sid: '100'
            :email: jane@example.edu
          :created_at: 2026-01-01 10:00:00.000000000 Z
    """
    out: dict[str, list[dict[str, str]]] = {}
    folder: str | None = None
    submitters_indent: int | None = None
    person: dict[str, str] | None = None
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        line = raw.strip()
        if indent == 0:
            folder, submitters_indent, person = None, None, None
            if line.endswith(":"):
                folder = _yaml_scalar(line[:-1])
                out[folder] = []
            continue
        if folder is None:
            continue
        if line == ":submitters:":
            submitters_indent, person = indent, None
            continue
        if submitters_indent is None:
            continue
        if line.startswith("- ") and indent in (submitters_indent, submitters_indent + 2):
            person = {}
            out[folder].append(person)
            line = line[2:].strip()
        elif indent <= submitters_indent:
            submitters_indent, person = None, None
            continue
        if person is not None and ":" in line.lstrip(":"):
            key, _, value = line.lstrip(":").partition(":")
            if value.strip():
                person[key.strip()] = _yaml_scalar(value)
    return out


def _yaml_scalar(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1].replace('\\"', '"')
    return text


def _visible(path: Path) -> bool:
    return not path.name.startswith(".") and path.name not in IGNORED_NAMES


def notebook_name(submission_file: str) -> str:
    """The notebook a student may hand in instead of the assignment's file: `fused_layers.ipynb`."""
    return Path(submission_file).stem + NOTEBOOK_SUFFIX


def find_submission_file(folder: Path, submission_file: str) -> tuple[Path | None, str]:
    """The assignment's file in `folder` (shallowest first), else its notebook (`<stem>.ipynb`), else its only
    `.py`, else its only notebook; else why not."""
    def visible_files(pattern: str) -> list[Path]:
        return [p for p in folder.rglob(pattern)
                if p.is_file() and all(_visible(Path(part)) for part in p.relative_to(folder).parts)]

    found = visible_files("*.py")
    notebooks = visible_files("*" + NOTEBOOK_SUFFIX)
    for name in (submission_file, notebook_name(submission_file)):
        exact = sorted((p for p in found + notebooks if p.name == name), key=lambda p: (len(p.parts), str(p)))
        if exact:
            return exact[0], ""
    if len(found) == 1:
        return found[0], ""
    if not found and len(notebooks) == 1:
        return notebooks[0], ""
    if not found:
        return None, f"no {submission_file} (and no other .py file or notebook) in the submission"
    names = ", ".join(sorted(str(p.relative_to(folder)) for p in found)[:8])
    return None, f"no {submission_file}, and several .py files to choose from: {names}"


def unzip_safely(archive: Path, into: Path) -> Path:
    """Extract regular files only, refusing absolute paths, `..` and archives over MAX_UNZIPPED_BYTES."""
    try:
        zf = zipfile.ZipFile(archive)
    except zipfile.BadZipFile as exc:
        raise BatchError(f"{archive} is not a readable zip file: {exc}") from None
    with zf:
        members = [m for m in zf.infolist() if not m.is_dir()]
        if sum(m.file_size for m in members) > MAX_UNZIPPED_BYTES:
            raise BatchError(f"{archive} unpacks to more than {MAX_UNZIPPED_BYTES >> 30} GiB")
        for member in members:
            parts = Path(member.filename.replace("\\", "/")).parts
            mode = (member.external_attr >> 16) & 0o170000
            if not parts or member.filename.startswith("/") or ".." in parts or mode == 0o120000:
                continue  # absolute, escaping or a symlink: never extracted
            target = into.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(member) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
    return into


def _unwrap(root: Path, submission_file: str) -> Path:
    """Descend through folders that only wrap one folder (a zip's top-level folder), unless that folder
    looks like one student's (it holds the submission file, or just one .py and no folders)."""
    while not (root / GRADESCOPE_METADATA).exists():
        entries = [p for p in root.iterdir() if _visible(p)]
        if len(entries) != 1 or not entries[0].is_dir():
            break
        inner = [p for p in entries[0].iterdir() if _visible(p)]
        one_student = any((entries[0] / name).is_file() for name in (submission_file, notebook_name(submission_file))) \
            or (sum(p.suffix == ".py" for p in inner) == 1 and not any(p.is_dir() for p in inner))
        if one_student:
            break
        root = entries[0]
    return root


def discover_submissions(source: Path, submission_file: str, scratch: Path) -> list[Submission]:
    """Every student in SUBMISSIONS (a folder or a zip), sorted by id; zips are unpacked into `scratch`."""
    source = Path(source)
    if source.is_file() and zipfile.is_zipfile(source):
        root = unzip_safely(source, scratch / "unzipped")
    elif source.is_dir():
        root = source
    else:
        raise BatchError(f"{source} is neither a folder nor a zip file of submissions")
    root = _unwrap(root, submission_file)
    metadata_path = root / GRADESCOPE_METADATA
    metadata = read_gradescope_metadata(metadata_path.read_text(encoding="utf-8", errors="replace")) \
        if metadata_path.is_file() else {}
    submissions = []
    for entry in sorted(root.iterdir()):
        if not _visible(entry) or entry.name == GRADESCOPE_METADATA:
            continue
        path: Path | None
        if entry.is_file() and (entry.suffix == ".py" or is_notebook(entry)):
            raw_id, path, problem = entry.stem, entry, ""
        elif entry.is_dir():
            raw_id = entry.name
            path, problem = find_submission_file(entry, submission_file)
        else:
            continue
        submitters = metadata.get(entry.name, [])
        student = Student(
            id=student_id(raw_id),
            name="; ".join(p.get("name", "") for p in submitters if p.get("name")),
            email="; ".join(p.get("email", "") for p in submitters if p.get("email")),
            sid="; ".join(p.get("sid", "") for p in submitters if p.get("sid")),
        )
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path else ""
        submissions.append(Submission(student, path, str(entry.relative_to(root)), digest, problem))
    _check_ids(submissions, source)
    return sorted(submissions, key=lambda s: s.id)


def _check_ids(submissions: Sequence[Submission], source: Path) -> None:
    seen: dict[str, str] = {}
    for s in submissions:
        if not s.id or s.id.lower() in RESERVED:
            raise BatchError(f"{s.source} in {source}: {s.id!r} cannot be a student id "
                             "(it names a batch file)")
        if s.id in seen:
            raise BatchError(f"{seen[s.id]} and {s.source} in {source} both give student id {s.id!r}")
        seen[s.id] = s.source
    if not submissions:
        raise BatchError(f"no submissions in {source} (expected .py files or one folder per student)")


# ------------------------------------------------------------------------------------------- output folder


@dataclass(frozen=True)
class Manifest:
    """DIR/batch.json: what every current result in DIR was graded with."""

    assignment: str
    backend: str
    seed: int
    generation: str  # changes with --force, a new seed or backend: results of older generations are regraded

    def to_dict(self) -> dict[str, Any]:
        return {"format_version": BATCH_FORMAT_VERSION, "assignment": self.assignment,
                "backend": self.backend, "seed": self.seed, "generation": self.generation}


def settle_manifest(out: Path, assignment: str, backend: str, seed: int | None, force: bool,
                    new_seed: Callable[[], int]) -> Manifest:
    """The manifest for this run: the folder's own, or (first run, --force) a new generation. A seed or
    backend other than the folder's needs --force: one gradebook never mixes inputs or backends."""
    path = out / MANIFEST
    old = None
    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            old = Manifest(data["assignment"], data["backend"], int(data["seed"]), data["generation"])
        except (ValueError, KeyError, TypeError):
            raise BatchError(f"{path} is damaged; move it away (or use a new --out) to start over") from None
    if old is not None:
        if old.assignment != assignment:
            raise BatchError(f"{out} holds a batch of assignment {old.assignment!r}, not {assignment!r}; "
                             "use another --out")
        if not force and seed is not None and seed != old.seed:
            raise BatchError(f"{out} was graded with seed {old.seed}; pass --force to regrade everyone with "
                             f"seed {seed}, or leave --seed out to continue")
        if not force and backend != old.backend:
            raise BatchError(f"{out} was graded on the {old.backend} backend, this run would use {backend}; "
                             f"pass --force to regrade everyone on {backend}, or --backend {old.backend}")
        if not force:
            return old
    chosen = seed if seed is not None else (old.seed if old is not None else new_seed())
    manifest = Manifest(assignment, backend, chosen, uuid.uuid4().hex)
    write_json(path, manifest.to_dict())
    return manifest


@contextlib.contextmanager
def locked(out: Path) -> Iterator[None]:
    """One batch at a time per output folder (the lock dies with the process, even on SIGKILL)."""
    out.mkdir(parents=True, exist_ok=True)
    handle = open(out / LOCK, "a+")  # noqa: SIM115 - held for the whole run
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BatchError(f"another `grader batch` is writing to {out}; wait for it or stop it") from None
        yield
    finally:
        handle.close()


def result_state(folder: Path, manifest: Manifest,
                 sha256: str) -> tuple[str, GradeResult | None, dict[str, Any]]:
    """("current" | "outdated" | "error" | "none", the result if any, the batch record if any)."""
    record = _read_json(folder / RECORD) or {}
    if (folder / "results.json").is_file():
        grade = _read_json(folder / "grade.json")
        if grade is not None:
            try:
                result = GradeResult.from_dict(grade)
            except (KeyError, TypeError, ValueError):
                result = None
            if result is not None:
                current = (record.get("generation") == manifest.generation
                           and record.get("submission_sha256") == sha256)
                return ("current" if current else "outdated"), result, record
    if (folder / ERROR).is_file():
        return "error", None, {**record, **(_read_json(folder / ERROR) or {})}
    return "none", None, record


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def commit(out: Path, outcome: JobOutcome, record: Mapping[str, Any]) -> Path:
    """Put one student's outputs in place as a whole: written into scratch, then the folder renamed."""
    scratch = out / SCRATCH
    staging = scratch / f"commit.{outcome.student}.{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    files = dict(outcome.files)
    if outcome.ok:
        files[RECORD] = _json_bytes(record)
    else:
        files[ERROR] = _json_bytes({**record, "error": outcome.error})
    for name, data in files.items():
        if "/" in name or name.startswith("."):
            continue
        with open(staging / name, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    final = out / outcome.student
    aside = None
    if final.exists():
        aside = scratch / f"replaced.{outcome.student}.{uuid.uuid4().hex[:8]}"
        os.replace(final, aside)
    os.replace(staging, final)
    _fsync_dir(out)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
    return final


def _json_bytes(data: Any) -> bytes:
    return (json.dumps(data, indent=2, allow_nan=False) + "\n").encode("utf-8")


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class EventLog:
    """DIR/batch-log.jsonl: one JSON object per line, appended and flushed as things happen."""

    def __init__(self, path: Path, run: str) -> None:
        self.run = run
        self.file: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def write(self, event: str, **data: Any) -> None:
        self.file.write(json.dumps({"run": self.run, "event": event, "time": _now(), **data}) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _iso(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.timezone.utc).isoformat(timespec="seconds")


# ------------------------------------------------------------------------------------------- progress


class Progress:
    """A one-line bar with ETA when `stream` is a terminal; one plain line per submission otherwise."""

    def __init__(self, stream: IO[str], total: int, interactive: bool | None = None) -> None:
        self.stream = stream
        self.total = total
        self.done = 0
        self.failed = 0
        self.started = time.monotonic()
        self.interactive = stream.isatty() if interactive is None else interactive
        self._drawn = False

    def line(self, text: str) -> None:
        if self.interactive and self._drawn:
            self.stream.write("\r\x1b[2K")
        self.stream.write(text + "\n")
        if self.interactive:
            self._draw()
        self.stream.flush()

    def advance(self, text: str, failed: bool = False) -> None:
        self.done += 1
        self.failed += int(failed)
        if self.interactive:
            if failed:
                self.line(text)
            else:
                self._draw()
        else:
            self.line(f"[{self.done:>{len(str(self.total))}}/{self.total}] {text}")

    def eta_s(self) -> float | None:
        if not self.done:
            return None
        return (time.monotonic() - self.started) / self.done * (self.total - self.done)

    def _draw(self) -> None:
        width = 30
        filled = int(width * self.done / self.total) if self.total else width
        eta = self.eta_s()
        eta_text = "--" if eta is None else _duration(eta)
        failed = f"  {self.failed} failed" if self.failed else ""
        self.stream.write(f"\r\x1b[2K[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}  "
                          f"ETA {eta_text}{failed}")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self.interactive and self._drawn:
            self.stream.write("\n")
            self.stream.flush()


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


# ------------------------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class BatchOptions:
    submissions: Path
    assignment: Assignment
    assignments_root: Path
    out: Path
    backend: str
    seed: int | None = None
    workers: int | None = None
    force: bool = False
    executor: str = "local"  # a name in grader.operations.executors.EXECUTORS
    ray_address: str | None = None
    gpus_per_task: float | None = None  # Ray, CUDA only; default 1 / executors.GRADES_PER_GPU
    grade_timeout_s: float | None = None
    canvas_column: str | None = None  # canvas.csv's assignment column, e.g. "Fused layers (12345)"
    calibration: CalibrationStore | None = None  # where the bars are cached; None: each grade measures its own


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


def default_grade_timeout(assignment: Assignment, backend: str) -> float:
    """A safety net far above what the grader's own limits allow (every case hanging, every restart)."""
    cases = len(assignment.cases_for(backend)) + len(assignment.kernels)
    return 2 * (assignment.import_timeout_s + cases * (assignment.call_timeout_s + 10)) + 600


def make_executor(options: BatchOptions, scratch: Path) -> Executor:
    factory = EXECUTORS.get(options.executor)
    if factory is None:
        raise BatchError(f"unknown executor {options.executor!r} ({' or '.join(EXECUTORS)})")
    return factory(ExecutorSettings(options.backend, scratch, options.workers, options.ray_address,
                                    options.gpus_per_task))


# ------------------------------------------------------------------------------------------- signals


INTERRUPT_AT = "GRADER_BATCH_INTERRUPT_AT"  # for tests only: see interrupt_signal


class Interrupts:
    """Ctrl-C (SIGINT) and SIGTERM while a batch runs, so that every moment is safe to interrupt.

    A signal is always recorded (`received`). It raises KeyboardInterrupt only inside `allowed()` (the
    grading loop, whose children are ended on the way out), and there not inside `held()` (one student's
    commit and its log line) but as that block ends. Anywhere else (discovery, the gradebook and class
    report, cleanup: all short) the run finishes what it does and then reports itself interrupted. Only
    the first signal raises: a second Ctrl-C cannot cut the way out short.

    Python runs signal handlers in the main thread whichever thread the kernel picked, so this holds with
    other threads around (Ray's), where a blocked signal mask would not.
    """

    def __init__(self) -> None:
        self.received = False
        self._raising = False  # inside allowed() and not inside held()
        self._raised = False

    def on_signal(self, _signum: int, _frame: Any) -> None:
        self.received = True
        self._honour()

    def _honour(self) -> None:
        if self.received and self._raising and not self._raised:
            self._raised = True
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def allowed(self) -> Iterator[None]:
        """A signal raises KeyboardInterrupt in here: at once, or on entry for one received before."""
        self._raising = True
        try:
            self._honour()
            yield
        finally:
            self._raising = False

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A signal waits for the end of this block (and raises there if allowed)."""
        raising, self._raising = self._raising, False
        try:
            yield
        finally:
            self._raising = raising
        self._honour()


@contextlib.contextmanager
def catching_interrupts() -> Iterator[Interrupts]:
    """SIGINT and SIGTERM handled by an `Interrupts` for the duration (handlers can only be set from the
    main thread; elsewhere no KeyboardInterrupt arrives anyway)."""
    interrupts = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield interrupts
        return
    previous = {sig: signal.signal(sig, interrupts.on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield interrupts
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def interrupt_signal(setting: str, point: str) -> signal.Signals | None:
    """The signal that GRADER_BATCH_INTERRUPT_AT=`setting` has the batch send itself at `point`, if any.

    For tests, which stop a batch at a chosen point instead of on a race: `graded:1` is SIGINT right
    after the first result of the run is committed and logged; `commit:2` is SIGINT between putting the
    second result in place and logging it; `gradebook` is SIGINT after the last grade, as the gradebook
    is written; `commit:2/SIGKILL` sends SIGKILL instead.
    """
    where, _, name = setting.partition("/")
    return signal.Signals[name or "SIGINT"] if where == point else None


def _interrupt_point(point: str) -> None:
    sig = interrupt_signal(os.environ.get(INTERRUPT_AT, ""), point)
    if sig is not None:
        os.kill(os.getpid(), sig)  # handled before os.kill returns


def run_batch(options: BatchOptions, stream: IO[str] | None = None,
              new_seed: Callable[[], int] = fresh_seed) -> BatchSummary:
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
    with catching_interrupts() as interrupts, locked(out):
        scratch = out / SCRATCH
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        try:
            assignment = options.assignment
            submissions = discover_submissions(options.submissions, assignment.submission_file, scratch)
            manifest = settle_manifest(out, assignment.id, options.backend, options.seed, options.force,
                                       new_seed)
            summary.seed = manifest.seed
            summary.students = len(submissions)
            todo = plan(out, submissions, manifest)
            summary.no_submission = sum(s.path is None for s in submissions)
            summary.skipped = len(submissions) - len(todo) - summary.no_submission
            try:
                _grade(options, manifest, todo, out, scratch, stream, summary, interrupts)
            except KeyboardInterrupt:
                summary.interrupted = True
            summary.files, summary.counts = _write_class_files(out, submissions, options.assignment, manifest,
                                                               options.canvas_column)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    summary.interrupted = summary.interrupted or interrupts.received
    summary.wall_s = round(time.monotonic() - started, 3)
    return summary


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
    # out-of-memory or timeout needs a second pass (grader.running.gpu_memory, grader.running.client).
    jobs = [GradeJob(s.id, s.path, options.assignment.submission_file, options.assignment.id,
                     Path(options.assignments_root), options.backend, manifest.seed, timeout,
                     hidden_from_students(options.submissions, out), calibration=options.calibration,
                     concurrent_grades=executor.grades_per_gpu())
            for s in todo if s.path is not None]
    log.write("run-start", executor=executor.describe(), to_grade=len(todo), seed=manifest.seed,
              backend=manifest.backend, generation=manifest.generation)
    progress.line(f"grading {len(todo)} of {summary.students} submissions ({summary.skipped} already graded, "
                  f"{summary.no_submission} without a file) with {executor.describe()}; seed {manifest.seed}")

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
                    _interrupt_point(f"commit:{n}")
                    _log_and_count(outcome, out, log, progress, summary)
                _interrupt_point(f"graded:{n}")
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
        "started_at": _iso(outcome.started_at) if outcome.started_at else "",
        "finished_at": _now(), "elapsed_s": outcome.elapsed_s,
    }


def _graded_line(folder: Path, outcome: JobOutcome) -> str:
    grade = _read_json(folder / "grade.json") or {}
    traps = ", ".join(grade.get("traps", [])) or "none"
    where = f", GPU {outcome.device}" if outcome.device else ""
    return (f"{outcome.student}: {grade.get('score', 0):g} / {grade.get('max_score', 0):g}  traps: {traps}  "
            f"({outcome.elapsed_s:.1f} s{where})")


# ------------------------------------------------------------------------------------------- gradebook


def build_gradebook(out: Path, submissions: Sequence[Submission], assignment: Assignment,
                    manifest: Manifest) -> tuple[Gradebook, dict[str, GradeResult]]:
    """Rows for every discovered student from what DIR holds, and the results behind scored rows."""
    points = target_points(assignment, manifest.backend)
    max_score = sum(points.values())
    rows: list[GradebookRow] = []
    results: dict[str, GradeResult] = {}
    for s in submissions:
        if s.path is None:
            rows.append(ungraded_row(s.student, "no-submission", max_score, error=s.problem))
            continue
        state, result, record = result_state(out / s.id, manifest, s.sha256)
        if result is not None:
            rows.append(graded_row(s.student, result, record, current=state == "current"))
            results[s.id] = result
        elif state == "error":
            rows.append(ungraded_row(s.student, "error", max_score, error=str(record.get("error", "")),
                                     sha256=s.sha256, record=record))
        else:
            rows.append(ungraded_row(s.student, "pending", max_score, sha256=s.sha256))
    book = Gradebook(assignment.id, assignment.title, max_score, points, tuple(rows), _now(),
                     manifest.seed, manifest.backend)
    return book, results


def _write_class_files(out: Path, submissions: Sequence[Submission], assignment: Assignment,
                       manifest: Manifest, canvas_column: str | None = None) -> tuple[list[Path], dict[str, int]]:
    book, results = build_gradebook(out, submissions, assignment, manifest)
    _interrupt_point("gradebook")
    return write_gradebook(out, book, class_stats(book, results, assignment), canvas_column), book.counts()


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
