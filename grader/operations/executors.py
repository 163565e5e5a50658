"""Executors for batch grading: each submission is graded in a process of its own, locally or on Ray.

A job is graded by a child process, `python -m grader.operations.executors ...`, that grades one submission and
writes its outputs (results.json, grade.json, reports) into a scratch folder. The executor hands the
files back as bytes in a `JobOutcome`; `grader.operations.batch` commits them. Nothing a submission does can
stop the batch: the submission runs in the grader's worker (a grandchild), the child's exit status and
log are recorded when it fails, and a child that outlives its deadline is killed.

Children die with whoever started them: each child is the leader of its own process group (a Ctrl-C
on the terminal reaches the batch only, which then ends every child), asks Linux to send it SIGTERM
when its parent dies (`PR_SET_PDEATHSIG`) and, on every platform, polls its parent's pid. On
SIGTERM a child kills its worker's process group before exiting, so no worker is left orphaned.

    LocalExecutor(workers, devices)   one child per slot; slot k grades on GPU devices[k % len]
    RayExecutor(address, ...)         one Ray task per submission; each task runs the same child

Both are `Executor`s, registered by name in EXECUTORS (`grader batch --executor NAME`), each made from
the batch's ExecutorSettings.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from grader.operations.batch_helpers import BatchHelpers, start_helpers
from grader.operations.child import POLL_INTERVAL_S, Child, signal_group
from grader.operations.child_template import Template, TemplateUnavailable
from grader.running.processes import cpu_threads
from grader.running.timing.calibration import CalibrationStore

LOG_TAIL_CHARS = 3000
WORKER_MEMORY_BYTES = 2 << 30  # one grade: the grading process and its worker, each with torch loaded
GRADES_PER_GPU = 4
PARENT_POLL_INTERVAL_S = 0.5


class ExecutorUnavailable(RuntimeError):
    """The executor asked for cannot run here (e.g. Ray is not installed); the message says why."""


@dataclass(frozen=True)
class GradeJob:
    """One submission to grade. `submission` is read by the executor, never by the student's code."""

    student: str
    submission: Path  # graded under its own name (`graded_name`), as `grader grade` would grade it
    assignment_id: str
    assignments_root: Path
    backend: str  # "interpreter", "cuda" or "auto" (the child detects it)
    seed: int
    timeout_s: float  # wall-clock limit for the whole grade (the grader's own limits come first)
    hidden: tuple[str, ...] = ()  # folders the student's code must not see (other students' files)
    calibration: CalibrationStore | None = None  # where the bars are cached, shared by the batch's grades
    concurrent_grades: int = 1  # grades sharing one GPU at a time: each worker's GPU memory budget
    seed_source: str = "given"  # where the seed came from (grader.authoring.course_seed): "course" stays unpublished
    profile: bool = True  # CUDA: the timed cases replayed once under Nsight Compute
    profile_every_case: bool = True  # off: only the timed cases whose counters could name a trap


OnStart = Callable[["GradeJob", str], None]  # called with the job and its GPU ("" if none) as it starts


@dataclass(frozen=True)
class JobOutcome:
    """What grading one job produced: the output files when it worked, else why it did not."""

    student: str
    ok: bool
    files: Mapping[str, bytes] = field(default_factory=dict)
    error: str = ""
    device: str = ""  # CUDA_VISIBLE_DEVICES the grade ran with; "" when not set
    started_at: float = 0.0  # time.time()
    elapsed_s: float = 0.0


class Executor(Protocol):
    """Grades jobs, each in a child process of its own, and yields one outcome per job as it finishes.
    Closing the iterator (or an exception, Ctrl-C included) ends every child still running."""

    def describe(self) -> str: ...

    def grades_per_gpu(self) -> int:
        """How many of its grades may share one GPU at a time (for GPU memory budgets)."""
        ...

    def run(self, jobs: Iterable[GradeJob],
            on_start: OnStart | None = None) -> Generator[JobOutcome, None, None]: ...


@dataclass(frozen=True)
class ExecutorSettings:
    """What a batch asks of its executor; each executor takes what concerns it."""

    backend: str  # "interpreter" or "cuda"
    scratch_root: Path
    workers: int | None = None  # grades at a time; None: the executor's default
    ray_address: str | None = None  # Ray: the cluster (None: a local Ray instance)
    gpus_per_task: float | None = None  # Ray on CUDA: share of a GPU per grade (None: 1 / GRADES_PER_GPU)


# ------------------------------------------------------------------------------------------- one child


def graded_name(job: GradeJob) -> str:
    """The name the child grades the submission under: the student's own (`erin.py`, `Copy of fused_layers.py`),
    so the report and grade.json name the file the student handed in, and a renamed copy of the assignment's
    file gets the same note as with `grader grade`. A notebook keeps its name too (grading converts it to the
    assignment's submission_file, see grader.operations.notebook)."""
    return job.submission.name


def child_command(job: GradeJob, submission: Path, out_dir: Path, pdeathsig: bool, held: bool = False,
                  parent: int | None = None) -> list[str]:
    """The child's command line; `parent`: the process whose end ends it (default: this one; a template's children
    have the template as their parent)."""
    command = [
        sys.executable, "-m", "grader.operations.executors",
        "--submission", str(submission),
        "--assignment", job.assignment_id,
        "--assignments", str(job.assignments_root),
        "--backend", job.backend,
        "--seed", str(job.seed), "--seed-source", job.seed_source,
        "--out", str(out_dir),
        "--parent", str(parent if parent is not None else os.getpid()),
    ]
    for path in job.hidden:
        command += ["--hide", path]
    if job.calibration is not None:
        command += job.calibration.to_args("--")
    command += ["--concurrent-grades", str(job.concurrent_grades)]
    if not job.profile:
        command.append("--no-profile")
    if not job.profile_every_case:
        command.append("--profile-where-needed")
    if held:
        command.append("--wait-for-go")
    if pdeathsig:
        command.append("--pdeathsig")
    return command


def _package_parent() -> str:
    return str(Path(__file__).resolve().parents[2])


def child_environment(device: str | None) -> dict[str, str]:
    """The child's environment: the caller's, with this grader importable (installed or not) and maybe
    one GPU made visible."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_parent(), env.get("PYTHONPATH", "")) if p)
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = device
    env["PYTHONUNBUFFERED"] = "1"
    return env


class _Attempt:
    """A child process grading one job, in a scratch folder of its own. `held`: it prepares (imports, starts
    the submission's sandbox) and waits for `child.go()` before grading."""

    def __init__(self, job: GradeJob, scratch: Path, device: str | None, pdeathsig: bool, held: bool = False,
                 template: Template | None = None, helpers: BatchHelpers | None = None) -> None:
        self.job = job
        self.scratch = scratch
        self.device = device
        submission = scratch / "submission" / graded_name(job)
        submission.parent.mkdir(parents=True)
        shutil.copyfile(job.submission, submission)
        self.out_dir = scratch / "out"
        self.child = _start_child(job, submission, self.out_dir, scratch, device, pdeathsig, held, template,
                                  helpers.environment() if helpers is not None else {})

    def outcome(self, timed_out: bool = False) -> JobOutcome:
        code = self.child.returncode
        elapsed = round(self.child.elapsed_s, 3)
        started_at = self.child.started_at
        device = self.device if self.device is not None else os.environ.get("CUDA_VISIBLE_DEVICES", "")
        files = _read_outputs(self.out_dir)
        if not timed_out and code == 0 and "results.json" in files and "grade.json" in files:
            return JobOutcome(self.job.student, True, files, "", device, started_at, elapsed)
        if timed_out:
            why = f"grading took longer than {self.job.timeout_s:g} s and was stopped"
        else:
            from grader.running.processes.client import describe_exit

            why = f"the grading process ended with {describe_exit(code)} without writing results"
        tail = self.child.tail(LOG_TAIL_CHARS)
        error = why + (f"\n--- its output (last {LOG_TAIL_CHARS} characters) ---\n{tail}" if tail else "")
        return JobOutcome(self.job.student, False, {}, error, device, started_at, elapsed)

    def cleanup(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


def _start_child(job: GradeJob, submission: Path, out_dir: Path, scratch: Path, device: str | None, pdeathsig: bool,
                 held: bool, template: Template | None, extra_env: Mapping[str, str]) -> Child:
    """The job's child: forked from the batch's `template` (its parent then), or started afresh; `extra_env`: what the
    batch's helpers tell it (grader.operations.batch_helpers)."""
    log, env = scratch / "child.log", {**child_environment(device), **extra_env}
    if template is not None:
        try:
            return Child(child_command(job, submission, out_dir, pdeathsig, held, template.pid), scratch, env, log,
                         job.timeout_s, held=held, template=template)
        except TemplateUnavailable:
            pass
    return Child(child_command(job, submission, out_dir, pdeathsig, held), scratch, env, log, job.timeout_s, held=held)


def run_job(job: GradeJob, scratch_root: Path, device: str | None = None) -> JobOutcome:
    """Grade one job to the end in a child process (what each Ray task, and the Gradescope bundle, does)."""
    attempt = _Attempt(job, Path(tempfile.mkdtemp(prefix=f"{job.student}.", dir=scratch_root)), device, False)
    try:
        return attempt.outcome(timed_out=attempt.child.wait() is None)
    finally:
        if attempt.child.poll() is None:
            attempt.child.terminate()
        attempt.cleanup()


def _read_outputs(out_dir: Path) -> dict[str, bytes]:
    if not out_dir.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in sorted(out_dir.iterdir())
            if p.is_file() and not p.name.startswith(".")}


# ------------------------------------------------------------------------------------------- local


def cuda_devices() -> list[str]:
    """The GPUs this process may use: $CUDA_VISIBLE_DEVICES's entries, else 0..device_count-1."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def default_workers(backend: str, devices: Sequence[str]) -> int:
    """As many grades as the CPUs and memory hold; on CUDA at most GRADES_PER_GPU per GPU."""
    cpus = cpu_threads.usable_cpus()
    workers = min(cpus, max(1, _available_memory() // WORKER_MEMORY_BYTES)) if _available_memory() else cpus
    if backend == "cuda" and devices:
        workers = min(workers, GRADES_PER_GPU * len(devices))
    return max(1, workers)


def _available_memory() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class LocalExecutor:
    """Up to `workers` children at a time on this machine. With GPUs, slot k grades on
    `devices[k % len(devices)]` (several slots may share one GPU)."""

    def __init__(self, workers: int, scratch_root: Path, devices: Sequence[str] = ()) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.workers = workers
        self.scratch_root = Path(scratch_root)
        self.devices = tuple(devices)

    @classmethod
    def from_settings(cls, settings: ExecutorSettings) -> LocalExecutor:
        devices = cuda_devices() if settings.backend == "cuda" else []
        return cls(settings.workers or default_workers(settings.backend, devices), settings.scratch_root, devices)

    def describe(self) -> str:
        """What grades, for "grading ... on {describe}": `2 local workers (GPUs 0,1)`."""
        gpus = f" (GPU{'s' if len(self.devices) != 1 else ''} {','.join(self.devices)})" if self.devices else ""
        return f"{self.workers} local worker{'s' if self.workers != 1 else ''}{gpus}"

    def grades_per_gpu(self) -> int:
        return max(1, -(-self.workers // max(1, len(self.devices))))

    def _device(self, n: int) -> str | None:
        return self.devices[n % len(self.devices)] if self.devices else None

    @property
    def lookahead(self) -> int:
        """Children prepared ahead of a free slot: each starts its submission's sandbox (its zygote imports torch
        and triton, seconds of CPU; the child itself, forked from the batch's template, imported them already)
        while the running grades go on."""
        return max(2, self.workers // 4)

    def run(self, jobs: Iterable[GradeJob],
            on_start: OnStart | None = None) -> Generator[JobOutcome, None, None]:
        """Yield one outcome per job as each finishes. Closing the iterator (or an exception, Ctrl-C
        included) ends every child still running. Every process the batch starts gets its share of the CPUs for
        torch's and numpy's thread pools (grader.running.processes.cpu_threads), unless the caller set them."""
        with cpu_threads.exported(self.workers):
            yield from self._run(jobs, on_start)

    def _run(self, jobs: Iterable[GradeJob], on_start: OnStart | None) -> Generator[JobOutcome, None, None]:
        pending = deque(jobs)
        ready: deque[_Attempt] = deque()  # prepared, waiting for a slot
        running: dict[int, _Attempt] = {}
        started = 0
        self.scratch_root.mkdir(parents=True, exist_ok=True)
        helpers = start_helpers(len(pending), [job.backend for job in pending], child_environment(None))
        template = helpers.template
        try:
            while pending or ready or running:
                while pending and len(ready) < self.lookahead:
                    job = pending.popleft()
                    scratch = Path(tempfile.mkdtemp(prefix=f"{job.student}.", dir=self.scratch_root))
                    ready.append(_Attempt(job, scratch, self._device(started), pdeathsig=True, held=True,
                                          template=template, helpers=helpers))
                    started += 1
                for slot in range(self.workers):
                    if slot not in running and ready:
                        attempt = running[slot] = ready.popleft()
                        attempt.child.go()
                        if on_start is not None:
                            on_start(attempt.job, attempt.device or "")
                finished = False
                for slot, attempt in list(running.items()):
                    code = attempt.child.poll()
                    if code is None and not attempt.child.overdue:
                        continue
                    if code is None:
                        attempt.child.terminate()
                    del running[slot]
                    outcome = attempt.outcome(timed_out=code is None)
                    attempt.cleanup()
                    finished = True
                    yield outcome
                if not finished:
                    time.sleep(POLL_INTERVAL_S)
        finally:
            for attempt in [*running.values(), *ready]:
                signal_group(attempt.child.pid, signal.SIGTERM)
            for attempt in [*running.values(), *ready]:
                attempt.child.terminate()
                attempt.cleanup()
            helpers.close()


# ------------------------------------------------------------------------------------------- ray


def _ray_grade(job: GradeJob, source: bytes) -> JobOutcome:
    """A Ray task: grade one job in a child process on whichever node runs the task. The submission
    travels as bytes, the outputs come back as bytes, so nodes need no shared file system (only the
    same grader installation and assignments folder)."""
    scratch_root = Path(tempfile.mkdtemp(prefix="grader-ray-"))
    try:
        local = scratch_root / "input" / graded_name(job)
        local.parent.mkdir(parents=True)
        local.write_bytes(source)
        return run_job(replace(job, submission=local), scratch_root)
    finally:
        shutil.rmtree(scratch_root, ignore_errors=True)


class RayExecutor:
    """One Ray task per submission, on the cluster at `address` or on a local Ray instance. With CUDA
    each task asks for `gpus_per_task` of a GPU (Ray sets CUDA_VISIBLE_DEVICES for it)."""

    def __init__(self, address: str | None, workers: int | None, gpus_per_task: float = 0.0,
                 num_cpus: int | None = None) -> None:
        self.address = address
        self.workers = workers
        self.gpus_per_task = gpus_per_task
        self.num_cpus = num_cpus

    @classmethod
    def from_settings(cls, settings: ExecutorSettings) -> RayExecutor:
        gpus = 0.0
        if settings.backend == "cuda":
            gpus = settings.gpus_per_task if settings.gpus_per_task is not None else 1 / GRADES_PER_GPU
        return cls(settings.ray_address, settings.workers, gpus, num_cpus=settings.workers)

    def grades_per_gpu(self) -> int:
        return max(1, round(1 / self.gpus_per_task)) if self.gpus_per_task else 1

    def describe(self) -> str:
        """What grades, for "grading ... on {describe}": `a local Ray instance`, `the Ray cluster at ADDR`."""
        where = f"the Ray cluster at {self.address}" if self.address else "a local Ray instance"
        gpus = f" ({self.gpus_per_task:g} GPU per grade)" if self.gpus_per_task else ""
        return f"{where}{gpus}"

    def run(self, jobs: Iterable[GradeJob],
            on_start: OnStart | None = None) -> Generator[JobOutcome, None, None]:
        try:
            import ray
        except ImportError:
            raise ExecutorUnavailable("--executor ray needs Ray: pip install 'kernel-grader[ray]'") from None
        started_here = not ray.is_initialized()
        if started_here:
            init: dict[str, Any] = {"address": self.address, "include_dashboard": False,
                                    "log_to_driver": False, "configure_logging": False}
            if self.address is None:  # a local instance: its workers import this grader, installed or not
                init["runtime_env"] = {"env_vars": {"PYTHONPATH": _package_parent()}}
                if self.num_cpus is not None:
                    init["num_cpus"] = self.num_cpus
            sigterm = signal.getsignal(signal.SIGTERM)
            try:
                ray.init(**init)
            except Exception as exc:  # no cluster at that address, a port in use, ...
                raise ExecutorUnavailable(f"cannot start or reach Ray ({self.describe()}): {exc}") from exc
            finally:  # ray.init makes SIGTERM sys.exit(); the caller's handler (the batch's) comes back
                if sigterm is not None and threading.current_thread() is threading.main_thread():
                    signal.signal(signal.SIGTERM, sigterm)
        task = ray.remote(num_cpus=1, num_gpus=self.gpus_per_task, max_retries=0)(_ray_grade)
        pending = deque(jobs)
        limit = self.workers or len(pending) or 1
        in_flight: dict[Any, GradeJob] = {}
        try:
            while pending or in_flight:
                while pending and len(in_flight) < limit:
                    job = pending.popleft()
                    in_flight[task.remote(job, job.submission.read_bytes())] = job
                    if on_start is not None:
                        on_start(job, "")
                done, _ = ray.wait(list(in_flight), num_returns=1, timeout=1.0)
                for ref in done:
                    job = in_flight.pop(ref)
                    try:
                        outcome = ray.get(ref)
                    except Exception as exc:  # the task itself failed (node lost, worker died)
                        outcome = JobOutcome(job.student, False, {}, f"the Ray task failed: {exc}")
                    yield outcome
        finally:
            for ref in in_flight:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # already finished or the cluster is gone
                    pass
            if started_here:
                ray.shutdown()


EXECUTORS: dict[str, Callable[[ExecutorSettings], Executor]] = {
    "local": LocalExecutor.from_settings,
    "ray": RayExecutor.from_settings,
}


# ------------------------------------------------------------------------------------------- the child


def _children_of(pid: int) -> list[int]:
    """Direct children of `pid` (Linux /proc; elsewhere `pgrep -P`)."""
    proc = Path("/proc")
    if proc.is_dir():
        found = []
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[-1].split()
            if len(fields) > 1 and fields[1] == str(pid):
                found.append(int(entry.name))
        return found
    try:
        out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [int(line) for line in out.split() if line.isdigit()]


def _kill_workers_and_exit(code: int) -> None:
    """Kill the worker process groups this child started (they are session leaders), then exit now:
    an interrupted grade must never write results."""
    for child in _children_of(os.getpid()):
        signal_group(child, signal.SIGKILL)
        try:
            os.kill(child, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    os._exit(code)


def _die_with_parent(parent: int, pdeathsig: bool) -> None:
    def on_signal(signum: int, _frame: Any) -> None:
        _kill_workers_and_exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    if pdeathsig:
        from grader.running.processes.confinement import die_with_parent

        die_with_parent(signal.SIGTERM)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_INTERVAL_S)
        _kill_workers_and_exit(1)

    if os.getppid() != parent:  # the parent died before we got here
        _kill_workers_and_exit(1)
    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def child_parser() -> argparse.ArgumentParser:
    """The child's command line (`child_command` writes it)."""
    parser = argparse.ArgumentParser(prog="python -m grader.operations.executors",
                                     description="grade one submission for `grader batch` (internal)")
    parser.add_argument("--submission", required=True, type=Path)
    parser.add_argument("--assignment", required=True)
    parser.add_argument("--assignments", required=True, type=Path)
    parser.add_argument("--backend", required=True, choices=("auto", "interpreter", "cuda"))
    parser.add_argument("--seed", required=True, type=int)
    parser.add_argument("--seed-source", default="given")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--parent", required=True, type=int)
    parser.add_argument("--pdeathsig", action="store_true")
    parser.add_argument("--hide", action="append", default=[], help="a folder the worker must not see")
    parser.add_argument("--calibration-dir", type=Path,
                        help="where the bars are cached (grader.running.timing.calibration)")
    parser.add_argument("--calibration-max-age-s", type=float)
    parser.add_argument("--calibrated-after", type=float)
    parser.add_argument("--concurrent-grades", type=int, default=1, help="grades sharing the GPU (memory budgets)")
    parser.add_argument("--no-profile", dest="profile", action="store_false",
                        help="no replay of the timed cases under Nsight Compute")
    parser.add_argument("--profile-where-needed", dest="profile_every_case", action="store_false",
                        help="replay under Nsight Compute only the timed cases whose counters could name a trap")
    parser.add_argument("--wait-for-go", action="store_true",
                        help="prepare (imports, the submission's sandbox), then wait for a line on stdin")
    return parser


def child_main(argv: list[str] | None = None) -> int:
    args = child_parser().parse_args(argv)
    _die_with_parent(args.parent, args.pdeathsig)
    cpu_threads.share_for_this_process()  # the batch's share (its environment says it)

    from grader.authoring.discovery import find_assignment
    from grader.backends import detect_backend
    from grader.operations.grade import GradeRequest, grade, prepare_sandbox
    from grader.publishing.files import write_outputs

    assignment = find_assignment(args.assignment, args.assignments)
    args.out.mkdir(parents=True, exist_ok=True)  # exists before any student code runs; hidden from it
    hidden = (*args.hide, str(args.out.resolve()))
    backend = detect_backend(args.backend)
    calibration = CalibrationStore.from_args(args.calibration_dir, args.calibration_max_age_s, args.calibrated_after)
    request = GradeRequest(assignment, args.submission.resolve(), backend, seed=args.seed,
                           seed_source=args.seed_source, hidden=hidden,
                           calibration=calibration, concurrent_grades=args.concurrent_grades, profile=args.profile,
                           profile_every_case=args.profile_every_case)
    if args.wait_for_go:
        # The submission's sandbox starts now (its zygote imports torch and triton) while we wait for a slot.
        request = replace(request, sandbox=prepare_sandbox(request))
        if not sys.stdin.readline():  # the batch went away before our turn
            if request.sandbox is not None:
                request.sandbox.close()
            return 0
    result, pytest_report = grade(request)
    write_outputs(args.out, result, assignment, pytest_report)
    return 0


if __name__ == "__main__":
    sys.exit(child_main())
