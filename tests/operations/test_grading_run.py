"""The grade path: GradingRun is pytest's plugin instance; results come back typed, never parsed from the
pytest-json-report record (grader.operations.grading_run, grader.operations.grade)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest

from grader.authoring.spec import Assignment, load_assignment
from grader.operations import grade as grade_module
from grader.operations.grade import GradeRequest, every_case, every_performance, grade
from grader.operations.grading_run import GradingRun
from grader.results import CaseResult


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def template_copy(assignment: Assignment, tmp_path: Path) -> Path:
    """The student template (its kernels store nothing yet): every case fails fast."""
    assert assignment.template_dir is not None
    source = assignment.template_dir / assignment.submission_file
    path = tmp_path / "student" / assignment.submission_file
    path.parent.mkdir()
    shutil.copyfile(source, path)
    return path


def test_the_run_collects_from_the_assignment_it_was_given(assignment: Assignment, tmp_path: Path) -> None:
    """Only the public cases of one target, from the Assignment object (never the spec re-read from disk),
    each graded into a typed CaseResult; pytest's record is handed back as text and still holds them."""
    # a public form (a public run of a full spec would grade the spec's public form, read from disk)
    one = dataclasses.replace(assignment, public=True, cases=tuple(
        c for c in assignment.cases if c.target == "row_mean_var_kernel" and c.is_public))
    submission = template_copy(assignment, tmp_path)
    result, report = grade(GradeRequest(one, submission, "interpreter", seed=3, gpu_compile_check=False))
    wanted = [c.id for c in one.cases_for("interpreter")]
    assert wanted and [c.case_id for c in result.cases if not c.case_id.startswith("false-hint")] == wanted
    assert all(isinstance(c, CaseResult) and not c.passed for c in result.cases)
    record = json.loads(report)
    outcomes = {t["nodeid"].rsplit("::", 1)[-1]: t["outcome"] for t in record["tests"]}
    assert all(outcomes[c] == "failed" for c in wanted)
    assert {k: v for k, v in outcomes.items() if k not in wanted} == {p.id: "skipped" for p in one.performance}
    assert "grader" not in record  # nothing of the grader's own rides in the record any more


def test_the_users_pytest_settings_never_reach_the_grades_pytest(assignment: Assignment, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """An instructor's PYTEST_ADDOPTS (`-x` would stop at the first failed case) and PYTEST_PLUGINS (a module that is
    not there) leave the grade alone: every case runs; the settings are the user's again afterwards."""
    monkeypatch.setenv("PYTEST_ADDOPTS", "-x")
    monkeypatch.setenv("PYTEST_PLUGINS", "no_such_plugin_module")
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    one = dataclasses.replace(assignment, public=True, cases=tuple(c for c in assignment.cases if c.is_public))
    result, _ = grade(GradeRequest(one, template_copy(assignment, tmp_path), "interpreter", seed=3,
                                   gpu_compile_check=False))
    graded = [c for c in result.cases if not c.case_id.startswith("false-hint")]
    assert len(graded) == len(one.cases_for("interpreter")) > 1
    assert all(not c.passed and "grader problem" not in c.message for c in graded)  # each ran, none was skipped
    assert os.environ["PYTEST_ADDOPTS"] == "-x" and os.environ["PYTEST_PLUGINS"] == "no_such_plugin_module"
    assert "PYTEST_DISABLE_PLUGIN_AUTOLOAD" not in os.environ


def test_a_case_pytest_never_ran_is_a_failed_case_that_says_so(assignment: Assignment, tmp_path: Path) -> None:
    run = GradingRun(assignment, template_copy(assignment, tmp_path), "interpreter", 3, public_only=True)
    try:
        cases = every_case(run)  # nothing ran
    finally:
        run.close()
    assert len(cases) == len(assignment.cases_for("interpreter", public_only=True))
    assert all(not c.passed and c.traps == ("unknown",) and "grader problem" in c.message for c in cases)


def test_a_performance_case_pytest_never_ran_says_so(assignment: Assignment, tmp_path: Path) -> None:
    run = GradingRun(assignment, template_copy(assignment, tmp_path), "cuda", 3, public_only=True)
    try:
        results = every_performance(run)  # nothing ran
    finally:
        run.close()
    assert [r.perf_id for r in results] == [p.id for p in assignment.performance]
    assert all(r.status == "error" and "a grader problem, not yours" in r.reason for r in results)


def test_the_run_closes_its_sandbox_even_when_pytest_breaks(assignment: Assignment, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[GradingRun] = []

    def broken(run: GradingRun) -> str:
        seen.append(run)
        raise RuntimeError("pytest broke")

    monkeypatch.setattr(grade_module, "run_pytest", broken)
    with pytest.raises(RuntimeError, match="pytest broke"):
        grade(GradeRequest(assignment, template_copy(assignment, tmp_path), "interpreter", seed=3))
    (run,) = seen
    assert not run.sandbox.root.exists()


def test_on_a_gpu_a_check_lists_its_performance_cases_untimed_and_says_how_to_time_them(
        assignment: Assignment, tmp_path: Path) -> None:
    """A check is the quick loop: on CUDA its performance cases are not timed unless asked (nothing starts: no
    timer, no reference), and each says how to time it; a grade times them."""
    from grader.operations.interactive import NOT_TIMED_BY_CHECK

    run = GradingRun(assignment, template_copy(assignment, tmp_path), "cuda", 3, public_only=True,
                     untimed=NOT_TIMED_BY_CHECK)
    try:
        results = [run.grade_performance(perf) for perf in assignment.performance]
        assert run._performance_runner is None  # nothing was started to time them
    finally:
        run.close()
    assert results and all(r.status == "skipped" and r.reason == NOT_TIMED_BY_CHECK for r in results)
    assert all(r.max_score == 0 for r in results)  # never passed, never failed, worth nothing either way
    assert "`grader check --timed`" in NOT_TIMED_BY_CHECK and "`grader grade` always does" in NOT_TIMED_BY_CHECK


def test_a_grader_defect_while_timing_names_itself_in_the_case(assignment: Assignment, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Timing that raises (a grader defect, e.g. on a kernel slower than anything it was tried on) leaves the case
    an error that names the exception, not "the case was not run"; the traceback goes to the grade's log."""

    class Broken:
        profiles: dict = {}

        def run(self, perf, battery, cases):
            raise ZeroDivisionError("float division by zero")

    run = GradingRun(assignment, template_copy(assignment, tmp_path), "cuda", 3, public_only=True)
    monkeypatch.setattr(run, "_runner", lambda: Broken())
    try:
        result = run.grade_performance(assignment.performance[0])
    finally:
        run.close()
    assert result.status == "error" and run.performance[assignment.performance[0].id] is result
    assert result.reason == ("the grader failed while timing this case (ZeroDivisionError: float division by zero): "
                             "a grader problem, not your code")
    assert "Traceback" in capsys.readouterr().err
