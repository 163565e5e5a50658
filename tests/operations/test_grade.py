"""grader/operations/grade.py without grading: a file that is not Python is rejected with complete results
and one reason; a public run of a full spec grades its public form; interpreter limits are weighed
against the GPU compile check. (Grades end to end: tests/test_cli.py, tests/e2e/.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader import trap_ids
from grader.authoring.spec import load_assignment
from grader.operations.grade import (
    GradeRequest,
    grade,
    grade_at_seeds,
    rejected_result,
    unreadable,
    weigh_interpreter_limits,
)
from grader.results import CaseResult
from grader.running.aot import NOT_RUN
from tests.conftest import ROOT

SPEC = ROOT / "assignments" / "softmax" / "assignment.toml"


def test_a_file_that_is_not_python_is_rejected_whole(tmp_path: Path) -> None:
    assignment = load_assignment(SPEC)
    path = tmp_path / "softmax.py"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    problem = unreadable(path)
    assert problem
    result, record = grade(GradeRequest(assignment, path, "interpreter", seed=1))
    assert result.rejected == problem and result.score == 0 and record
    # every case, and the compile checks any interpreter grade has (the same tests for Gradescope)
    assert [c.case_id for c in result.cases] == [c.id for c in assignment.cases_for("interpreter")] + [
        "gpu-compile-softmax_kernel", "gpu-compile-online_softmax_kernel"]
    assert all(c.traps == (trap_ids.NOT_PYTHON_SOURCE,) for c in result.cases)


def test_a_public_run_grades_the_public_form(tmp_path: Path) -> None:
    request = GradeRequest(load_assignment(SPEC), tmp_path / "softmax.py", "interpreter", seed=1, public_only=True)
    assert request.public_run
    rejected = rejected_result(request, "nothing ran")
    assert {c.visibility for c in rejected.cases} == {"public"} and rejected.public_only
    assert rejected.notes == ("nothing ran",)


def test_interpreter_limits_weighed_against_the_compile_check() -> None:
    assignment = load_assignment(SPEC)

    def case(case_id: str, target: str, traps: tuple[str, ...], passed: bool = False) -> CaseResult:
        return CaseResult(case_id, target, case_id, "public", 1.0, 1.0 if passed else 0.0, passed, "msg", traps)

    limited = case("kernel-basic", "softmax_kernel", (trap_ids.INTERPRETER_UNSUPPORTED,))
    compiles = [case("compiles-softmax_kernel", "softmax_kernel", (), passed=True)]
    kept, notes = weigh_interpreter_limits([limited], compiles, assignment)
    assert kept[0].traps == (trap_ids.INTERPRETER_UNSUPPORTED,) and "grade it on a GPU backend" in kept[0].message
    assert len(notes) == 1 and "1 case(s), 1 point(s)" in notes[0]
    fails = [case("compiles-softmax_kernel", "softmax_kernel", (trap_ids.COMPILE_ERROR,))]
    kept, notes = weigh_interpreter_limits([limited], fails, assignment)
    assert trap_ids.INTERPRETER_UNSUPPORTED not in kept[0].traps and notes == []
    # a check that compiled nothing (the kernel missing) tells nothing about the interpreter's limits
    missing = [CaseResult("gpu-compile-softmax_kernel", "softmax_kernel", "t", "public", 0.0, 0.0, False,
                          "Not compiled: softmax.py does not define `softmax_kernel`.", (), {"compile": NOT_RUN})]
    kept, notes = weigh_interpreter_limits([limited], missing, assignment)
    assert kept[0].traps == (trap_ids.INTERPRETER_UNSUPPORTED,)
    assert "(The kernel does not compile" not in kept[0].message


@pytest.mark.slow
def test_grading_at_several_seeds_in_one_run_is_grading_at_each_alone(tmp_path: Path) -> None:
    """grade_at_seeds (the selftest's --seeds): one sandbox, one import, each seed's cases in turn; every seed's
    result is what a grade at that seed alone gives (scores, traps, messages of every case), the first seed's
    source kept and the others `given`."""
    from tests.conftest import corpus_mutant

    spec = load_assignment(ROOT / "assignments" / "softmax" / "assignment.toml")
    _, text = corpus_mutant("padding_zero", "softmax")
    submission = tmp_path / "softmax.py"
    submission.write_text(text, encoding="utf-8")
    together = grade_at_seeds(GradeRequest(spec, submission, "interpreter", seed=11, more_seeds=(12, 11),
                                           performance=False, gpu_compile_check=False))
    assert [r.seed for r, _ in together] == [11, 12]
    for result, _ in together:
        (alone, _) = grade(GradeRequest(spec, submission, "interpreter", seed=result.seed, performance=False,
                                        gpu_compile_check=False))
        assert [(c.case_id, c.score, c.traps, c.message) for c in result.cases] == \
            [(c.case_id, c.score, c.traps, c.message) for c in alone.cases]
        assert result.seed_source == alone.seed_source == "given"


@pytest.mark.slow
def test_an_import_that_never_returns_costs_one_timeout(tmp_path: Path) -> None:
    """A `while True:` at module level: the cases' import times out once; the GPU compile check does not import it
    again (it says the import does not finish); every case names module-level code, the file once, and the
    timeout's fix is about module-level code, not a kernel's loop."""
    import dataclasses

    from grader.publishing import report

    limit = 4.0
    spec = dataclasses.replace(load_assignment(SPEC), import_timeout_s=limit)
    submission = tmp_path / "softmax.py"
    submission.write_text("while True:\n    pass\n", encoding="utf-8")
    result, _ = grade(GradeRequest(spec, submission, "interpreter", seed=1, performance=False))
    compile_checks = [c for c in result.cases if c.case_id.startswith("gpu-compile-")]
    cases = [c for c in result.cases if c not in compile_checks]
    assert compile_checks and cases
    for case in cases:
        assert case.traps == (trap_ids.TIMEOUT,) and (case.evidence or {}).get("at_import") is True
        assert case.message.startswith("Importing softmax.py did not finish within 4 s: code at module level")
        assert case.message.count("softmax.py") == 1
    for check in compile_checks:
        assert not check.passed and "importing softmax.py does not finish" in check.message
    assert result.phases["compile"] < limit / 2  # the check waited for no second import
    assert not any("GPU compile check skipped" in n for n in result.notes)
    words = " ".join(report.terminal(result, spec).split())  # unwrapped
    assert "range(0, K, BLOCK_K)" not in words and "Importing your file did not finish" in words
    assert "Fix: Keep only imports, constants and definitions at module level" in words
