"""pytest plugin: turns an assignment spec into test items, one per case, graded through the worker.

Active only when `--grader-submission` is given (the grader passes `-p grader.operations.pytest_plugin`). Each
item's CaseResult travels in pytest-json-report's per-test metadata; the grader builds its results
from that report, so the JSON report is the single record of what ran.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from grader.authoring.spec import Assignment, Case, PerfCase, load_assignment, load_public_assignment
from grader.publishing.results import CaseResult, PerfResult
from grader.running.battery import Battery
from grader.running.sanitizer import sanitizer_command
from grader.seeds import fresh_seed


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("grader", "kernel grader: grade a submission against an assignment spec")
    group.addoption("--grader-submission", default=None, help="the submission file to grade")
    group.addoption("--grader-backend", default="interpreter", choices=("interpreter", "cuda"))
    group.addoption("--grader-seed", type=int, default=None, help="seed for the generated inputs")
    group.addoption("--grader-public-only", action="store_true",
                    help="run only public cases, from the spec's public form (grader.authoring.public)")
    group.addoption("--grader-sanitize", action="store_true",
                    help="CUDA: run kernel cases once more under compute-sanitizer memcheck")
    group.addoption("--grader-no-performance", action="store_true",
                    help="leave out the spec's performance cases (e.g. in the selftest)")
    group.addoption("--grader-target", action="append", default=[],
                    help="run only this target's cases (repeatable; default: every target)")
    group.addoption("--grader-hide", action="append", default=[],
                    help="a folder the worker must not see (repeatable), e.g. the output folder")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--grader-submission"):
        config.pluginmanager.register(GradingSession(config), "grader-session")


class CaseFailed(Exception):
    def __init__(self, result: CaseResult) -> None:
        super().__init__(result.message)
        self.result = result


class GradingSession:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.submission = Path(config.getoption("--grader-submission")).resolve()
        self.backend = config.getoption("--grader-backend")
        seed = config.getoption("--grader-seed")
        self.seed = seed if seed is not None else fresh_seed()
        self.public_only = bool(config.getoption("--grader-public-only"))
        self.hidden = tuple(config.getoption("--grader-hide"))
        self.targets = frozenset(config.getoption("--grader-target"))
        self.performance = not config.getoption("--grader-no-performance")
        sanitize = bool(config.getoption("--grader-sanitize")) and self.backend == "cuda"
        self.sanitizer = sanitizer_command() if sanitize else None
        self.battery: Battery | None = None
        self.perf_runner: Any = None  # grader.running.perf_runner.PerfRunner, made when a performance case runs
        self.case_results: list[CaseResult] = []  # correctness results so far: they gate performance

    def battery_for(self, assignment: Assignment) -> Battery:
        if self.battery is None:
            self.battery = Battery(assignment, self.submission, self.backend, self.seed, hidden=self.hidden,
                                   sanitizer=self.sanitizer)
        return self.battery

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        if file_path.name == "assignment.toml":
            return AssignmentFile.from_parent(parent, path=file_path, session_state=self)
        return None

    def run_performance(self, assignment: Assignment, perf: PerfCase) -> PerfResult:
        from grader.judging import performance
        from grader.running import perf_runner as benchmark

        if self.backend != "cuda":  # nothing to start: the interpreter cannot time anything
            return performance.skipped(perf)
        if self.perf_runner is None:
            self.perf_runner = benchmark.PerfRunner(assignment, self.seed)
        battery = self.battery_for(assignment)
        with battery.clock.phase("timing"):
            return self.perf_runner.run(perf, battery, self.case_results)

    def pytest_sessionfinish(self) -> None:
        if self.perf_runner is not None:
            self.perf_runner.close()
        if self.battery is not None:
            self.battery.close()

    @pytest.hookimpl(optionalhook=True)
    def pytest_json_runtest_metadata(self, item: pytest.Item, call: pytest.CallInfo[Any]) -> dict[str, Any]:
        result = getattr(item, "grade", None)
        if call.when == "call" and result is not None:
            return {"grade": result.to_dict()}
        perf = getattr(item, "performance", None)
        if call.when == "call" and perf is not None:
            return {"performance": perf.to_dict()}
        return {}

    @pytest.hookimpl(optionalhook=True)
    def pytest_json_modifyreport(self, json_report: dict[str, Any]) -> None:
        json_report["grader"] = {
            "submission": str(self.submission),
            "backend": self.backend,
            "seed": self.seed,
            "public_only": self.public_only,
            "phases": self.battery.phases() if self.battery is not None else {},
        }


class AssignmentFile(pytest.File):
    def __init__(self, *, session_state: GradingSession, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.session_state = session_state

    def collect(self):
        state = self.session_state
        assignment = load_public_assignment(self.path) if state.public_only else load_assignment(self.path)
        for case in assignment.cases_for(state.backend, public_only=state.public_only):
            if not state.targets or case.target in state.targets:
                yield CaseItem.from_parent(self, name=case.id, case=case, assignment=assignment)
        for perf in assignment.performance if state.performance else ():  # after the cases: they gate it
            if state.targets and perf.target not in state.targets:
                continue
            yield PerfItem.from_parent(self, name=perf.id, perf=perf, assignment=assignment)


def session_of(item: pytest.Item) -> GradingSession:
    """The grading session of the AssignmentFile an item was collected from."""
    parent = item.parent
    assert isinstance(parent, AssignmentFile), f"{item.nodeid} was not collected from an assignment file"
    return parent.session_state


class CaseItem(pytest.Item):
    def __init__(self, *, case: Case, assignment: Assignment, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.assignment = assignment
        self.grade: CaseResult | None = None

    def runtest(self) -> None:
        state = session_of(self)
        self.grade = state.battery_for(self.assignment).run_case(self.case)
        state.case_results.append(self.grade)
        if not self.grade.passed:
            raise CaseFailed(self.grade)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, CaseFailed):
            return excinfo.value.result.message
        return f"grader internal error: {excinfo.exconly()}"

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"{self.case.target}: {self.case.id}"


class PerfItem(pytest.Item):
    """A performance case: timed on CUDA once its target's correctness cases passed; otherwise skipped
    with the reason (a performance case never fails the test run)."""

    def __init__(self, *, perf: PerfCase, assignment: Assignment, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.perf = perf
        self.assignment = assignment
        self.performance: PerfResult | None = None

    def runtest(self) -> None:
        state = session_of(self)
        self.performance = state.run_performance(self.assignment, self.perf)
        if not self.performance.timed:
            pytest.skip(f"{self.performance.status}: {self.performance.reason}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        return f"grader internal error: {excinfo.exconly()}"

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"performance {self.perf.target}: {self.perf.id}"
