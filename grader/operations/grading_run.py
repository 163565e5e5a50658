"""One submission's grade as a pytest run: the plugin instance that owns the workers and keeps the results.

`grader.operations.grade.grade` makes a `GradingRun` and hands it to `pytest.main(..., plugins=[run])`.
pytest is the battery runner: the run collects one item per correctness case and one per performance
case from the validated `Assignment` it was given (never re-read), each item asks the run to grade its
case, and the run keeps the typed results (`CaseResult`, `PerformanceResult`, phase seconds). pytest-json-report
writes its record of what ran as an artifact (pytest-report.json); nothing is read back from it.

The run owns every worker of the grade: the battery's (the submission's worker, the replayer, the
sanitizer) and the performance runner's (the timer, the reference), all stopped when pytest finishes. A CUDA
grade may also have a CPU companion (grader.running.cases.cpu_companion): Triton's interpreter in a sandbox of its
own, which checks the submission's tl.multiple_of / tl.max_contiguous promises while the GPU cases run (only a
submission that makes such promises gets one from the start) and grades again, on the CPU, a case whose GPU
fault compute-sanitizer could not name.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grader import trap_ids
from grader.authoring.spec import Assignment, Case, PerformanceCase
from grader.backends import Backend
from grader.evidence.kernel_profiles import CaseProfile
from grader.results import CaseResult, PerformanceResult
from grader.running.cases.battery import Battery
from grader.running.cases.cpu_companion import CpuCompanion, hint_check_cases, makes_promises
from grader.running.cases.sanitizer import sanitizer_command
from grader.running.processes.sandbox import Sandbox, start_sandbox
from grader.running.timing.calibration import CalibrationStore
from grader.seeds import run_seeds


class GradingRun:
    """The grade of one submission: its settings, its workers, its results so far."""

    def __init__(self, assignment: Assignment, submission: Path, backend: Backend, seed: int, *,
                 more_seeds: tuple[int, ...] = (), public_only: bool = False, hidden: tuple[str, ...] = (),
                 targets: tuple[str, ...] = (),
                 performance: bool = True, sanitize: bool = False,
                 calibration: CalibrationStore | None = None, concurrent_grades: int = 1,
                 sandbox: Sandbox | None = None, profile: bool = True, untimed: str = "",
                 compile_memo: Path | None = None, profile_every_case: bool = True) -> None:
        """`calibration`: where performance bars are cached (None: measured for this grade alone).
        `compile_memo`: `grader check`'s folder of remembered compile checks (None: compiled afresh).
        `untimed`: on CUDA, the performance cases are listed as skipped for this reason instead of timed.
        `profile`: on CUDA, each timed case replayed once under Nsight Compute (`profiles`, for the judge);
        `profile_every_case` off: only the timed cases whose counters could name a trap (a batch's way).
        `concurrent_grades`: how many grades share this GPU (a batch's), for each worker's memory budget.
        `sandbox`: the submission's sandbox, started ahead (start_sandbox); the run closes it.
        `more_seeds`: grade the correctness cases at these seeds too, in the same workers (one import, one compile):
        `seed_cases` then holds each seed's results, each what a run at that seed alone gives a stateless
        submission (the selftest's --seeds). Performance cases and the promise check run at `seed` only."""
        self.assignment = assignment
        self.submission = Path(submission).resolve()
        self.backend = Backend(backend)  # a name is taken too
        self.seed = seed
        self.seeds = run_seeds(seed, more_seeds)
        self.public_only = public_only
        self.hidden = hidden
        self.targets = frozenset(targets)
        self.run_performance = performance
        self.untimed = untimed
        self.calibration = calibration
        self.compile_memo = compile_memo
        self.sanitizer = sanitizer_command() if sanitize and self.backend.on_gpu else None
        # A case that ends in a GPU memory fault runs again alone under memcheck, where it is installed.
        self.fault_tool = sanitizer_command() if self.backend.on_gpu else None
        self.cases: list[CaseResult] = []  # correctness results at `seed`, in run order: they gate performance
        self.seed_cases: dict[int, list[CaseResult]] = {s: [] for s in self.seeds}
        self.performance: dict[str, PerformanceResult] = {}
        self.profile = profile
        self.profile_every_case = profile_every_case
        self.profiles: dict[str, CaseProfile] = {}  # perf id -> its profiled replay (CUDA), for the judge
        self._battery: Battery | None = None
        self._performance_runner: Any = None  # a grader.running.timing.runner.PerformanceRunner, made at the first
        # timed case
        # The submission's sandbox for this grade: its zygote starts importing torch and triton now (or did,
        # ahead), while pytest starts, and forks every worker of the grade (the battery's, the timer).
        self.sandbox = sandbox or start_sandbox(assignment, self.submission, self.backend, hidden,
                                                      concurrent_grades)
        self.concurrent_grades = concurrent_grades
        self.gpu_budget = self.sandbox.gpu_budget
        # CUDA, code that makes tl.multiple_of / tl.max_contiguous promises: the interpreter checks them on the CPU,
        # from now on, while the GPU cases run.
        self._cpu: CpuCompanion | None = None
        self.hint_check = self.backend.on_gpu and makes_promises(self.submission)
        self.hint_cases = hint_check_cases(assignment, public_only, self.targets) if self.hint_check else ()
        if self.hint_check:
            self.cpu_companion().start_hint_check(self.hint_cases)

    # ------------------------------------------------------------------ what the run grades

    def correctness_cases(self) -> tuple[Case, ...]:
        return tuple(c for c in self.assignment.cases_for(self.backend, public_only=self.public_only)
                     if not self.targets or c.target in self.targets)

    def performance_cases(self) -> tuple[PerformanceCase, ...]:
        if not self.run_performance:
            return ()
        return tuple(p for p in self.assignment.performance if not self.targets or p.target in self.targets)

    @property
    def battery(self) -> Battery:
        if self._battery is None:
            self._battery = Battery(self.assignment, self.submission, self.backend, self.seed, hidden=self.hidden,
                                    sanitizer=self.sanitizer, sandbox=self.sandbox, fault_tool=self.fault_tool,
                                    cpu_rerun=self.rerun_on_cpu if self.backend.on_gpu else None)
        return self._battery

    def cpu_companion(self) -> CpuCompanion:
        """The grade's CPU companion, started on first use (from the grade's thread: its sandbox dies with it)."""
        if self._cpu is None:
            self._cpu = CpuCompanion(self.assignment, self.submission, self.seed, self.hidden)
        return self._cpu

    def rerun_on_cpu(self, case: Case, seed: int) -> CaseResult | None:
        """A case that faulted on the GPU, or whose wrong values nothing named, graded again in Triton's interpreter
        on the same inputs (grader/judging/faults.py)."""
        return self.cpu_companion().rerun(case, seed)

    def cpu_hint_evidence(self) -> dict[str, Any]:
        """CUDA: the interpreter's first false promise per case id (empty where the source makes no promises);
        waits for the check, which runs alongside the correctness cases, never alongside the timed ones."""
        return self._cpu.hint_evidence() if self.hint_check and self._cpu is not None else {}

    def cpu_notes(self) -> list[str]:
        """What the grade's notes say about the CPU companion's hint check."""
        if not self.hint_check or self._cpu is None:
            return []
        notes = [f"The submission makes tl.multiple_of / tl.max_contiguous promises: {self._cpu.cases_checked} case(s) "
                 "also ran in Triton's CPU interpreter, which checks each promise against the values (the GPU trusts "
                 "them); a false one is a zero-point false-hint warning, as in a CPU grade."]
        if self._cpu.problems:
            notes.append("The CPU check of the promises could not run every case (a grader problem, not yours): "
                         + "; ".join(self._cpu.problems[:3]))
        return notes

    def timing_notes(self) -> list[str]:
        """What the grade's notes say when the GPU memory watch stood aside in a timer (its own kernels failed their
        self-test there): the samples were still checked, but memory outside the case's buffers was not watched."""
        runner = self._performance_runner
        why = sorted(runner.contestants.unwatched) if runner is not None else []
        return [f"The timed samples were not watched for device memory outside your buffers ({'; '.join(why)[:300]}): "
                "a kernel that keeps its answer there between samples could not be refused. A problem of the grader "
                "on this machine, not your code: the instructor may re-grade."] if why else []

    def grade_case(self, case: Case, seed: int | None = None) -> CaseResult:
        seed = self.seed if seed is None else seed
        if not any(self.seed_cases.values()):  # the first case: compile every case's kernels first, in parallel (GPU)
            self._start_timing_early()
            self.battery.warm_up(self.correctness_cases())
        result = self.battery.run_case(case, seed)
        self.seed_cases.setdefault(seed, []).append(result)
        if seed == self.seed:
            self.cases.append(result)
        return result

    def _timing_here(self) -> bool:
        return self.backend.on_gpu and not self.untimed and bool(self.performance_cases())

    def _runner(self) -> Any:
        """The grade's PerformanceRunner, made at first use."""
        from grader.running.timing.runner import PerformanceRunner

        if self._performance_runner is None:
            self._performance_runner = PerformanceRunner(self.assignment, self.seed, perfs=self.performance_cases(),
                                                         calibration=self.calibration, profile=self.profile,
                                                         profile_every_case=self.profile_every_case)
        return self._performance_runner

    def _start_timing_early(self) -> None:
        """Where this grade will time cases, the reference's worker starts with the correctness cases (from the
        grade's thread: a worker dies with the thread that spawned it), its imports off the timing phase's path."""
        if self._timing_here():
            self._runner().start_reference_early()

    def grade_performance(self, perf: PerformanceCase) -> PerformanceResult:
        from grader.judging import performance

        if not self.backend.on_gpu:  # nothing to start: the interpreter cannot time anything
            result = performance.skipped(perf)
        elif self.untimed:
            result = performance.skipped(perf, self.untimed)
        else:
            self.cpu_hint_evidence()  # the CPU check of the promises ends first: nothing else runs while timing
            try:
                with self.battery.clock.phase("timing"):
                    result = self._runner().run(perf, self.battery, self.cases)
            except Exception as exc:  # a defect of the grader's: the case says which, not "the case was not run"
                traceback.print_exc()  # the whole of it in the grade's log, for whoever fixes the grader
                result = performance.errored(perf, f"the grader failed while timing this case ({type(exc).__name__}: "
                                                   f"{str(exc)[:300]}): a grader problem, not your code")
            self.profiles.update(self._performance_runner.profiles if self._performance_runner else {})
        self.performance[perf.id] = result
        return result

    def phases(self) -> dict[str, float]:
        return self.battery.phases() if self._battery is not None else {}

    def compile_check(self) -> tuple[list[CaseResult], list[str]]:
        """The interpreter's companion check: every kernel compiled for sm_90 (grader.running.aot), in a
        sandbox of its own (Triton must be imported without the interpreter for it). It needs nothing of the
        cases, so it may run beside them; `settle_compile_check` then weighs it against what they found."""
        from grader.running.aot import aot_check

        if self.compile_memo is None:
            return aot_check(self.assignment, self.submission, self.hidden)
        from grader.operations.compile_memo import CompileMemo, memo_key

        memo, key = CompileMemo(self.compile_memo), memo_key(self.assignment, self.submission)
        remembered = memo.load(key)
        if remembered is not None:
            return remembered
        checked = aot_check(self.assignment, self.submission, self.hidden)
        memo.store(key, checked)
        return checked

    def settle_compile_check(self, checked: tuple[list[CaseResult], list[str]]) -> tuple[list[CaseResult], list[str]]:
        """The compile check's results, unless importing the file timed out for the cases: then every kernel's check
        says it could not be compiled, in the words of one import timeout per grade (not the check's own)."""
        from grader.running.aot import import_never_finishes

        problem = self._battery.import_problem if self._battery is not None else None
        if problem is not None and problem.trap == trap_ids.TIMEOUT:
            return import_never_finishes(self.assignment, self.submission.name), []
        return checked

    def close(self) -> None:
        """Stop every worker of the grade and the sandbox (nothing of the submission outlives it)."""
        if self._performance_runner is not None:
            self._performance_runner.close()
            self._performance_runner = None
        if self._battery is not None:
            self._battery.close()
            self._battery = None
        if self._cpu is not None:
            self._cpu.close()
            self._cpu = None
        self.sandbox.close()
        if self.gpu_budget is not None:
            self.gpu_budget.watchdog.close()
            self.gpu_budget.reader.close()

    # ------------------------------------------------------------------ pytest hooks

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        if file_path == self.assignment.spec_path:
            return AssignmentFile.from_parent(parent, path=file_path, run=self)
        return None

    def pytest_sessionfinish(self) -> None:
        """The timer and the reference are done once every item ran; the sandbox stays for the compile check."""
        if self._performance_runner is not None:
            self._performance_runner.close()
            self._performance_runner = None

    @pytest.hookimpl(optionalhook=True)
    def pytest_json_runtest_metadata(self, item: pytest.Item, call: pytest.CallInfo[Any]) -> dict[str, Any]:
        """The artifact's record of each item's result (pytest-report.json; the grader never reads it)."""
        if call.when != "call":
            return {}
        if isinstance(item, CaseItem) and item.result is not None:
            return {"grade": item.result.to_dict()}
        if isinstance(item, PerformanceItem) and item.result is not None:
            return {"performance": item.result.to_dict()}
        return {}


class CaseFailed(Exception):
    def __init__(self, result: CaseResult) -> None:
        super().__init__(result.message)
        self.result = result


class AssignmentFile(pytest.File):
    def __init__(self, *, run: GradingRun, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run = run

    def collect(self) -> Iterator[pytest.Item]:
        for seed in self.run.seeds:  # the grade's own seed first: its results gate the performance cases
            for case in self.run.correctness_cases():
                name = case.id if seed == self.run.seed else f"{case.id}@seed{seed}"
                yield CaseItem.from_parent(self, name=name, case=case, seed=seed)
        for perf in self.run.performance_cases():  # after the cases: they gate it
            yield PerformanceItem.from_parent(self, name=perf.id, perf=perf)


class CaseItem(pytest.Item):
    def __init__(self, *, case: Case, seed: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.seed = seed
        self.result: CaseResult | None = None

    def runtest(self) -> None:
        parent = self.parent
        assert isinstance(parent, AssignmentFile)
        self.result = parent.run.grade_case(self.case, self.seed)
        if not self.result.passed:
            raise CaseFailed(self.result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, CaseFailed):
            return excinfo.value.result.message
        return f"grader internal error: {excinfo.exconly()}"

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"{self.case.target}: {self.case.id}"


class PerformanceItem(pytest.Item):
    """A performance case: timed on CUDA once its target's correctness cases passed; otherwise skipped
    with the reason (a performance case never fails the test run)."""

    def __init__(self, *, perf: PerformanceCase, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.perf = perf
        self.result: PerformanceResult | None = None

    def runtest(self) -> None:
        parent = self.parent
        assert isinstance(parent, AssignmentFile)
        self.result = parent.run.grade_performance(self.perf)
        if not self.result.timed:
            pytest.skip(f"{self.result.status}: {self.result.reason}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        return f"grader internal error: {excinfo.exconly()}"

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"performance {self.perf.target}: {self.perf.id}"
