"""What a student sees on Gradescope before the due date: the top level of results.json (output,
extra_data, leaderboard) and the tests whose visibility is `visible`. Hidden cases appear there only as a
count with their points; each hidden test keeps the spec's visibility and its full detail.

Fast: hand-made results through the real serialisers (grader.publishing.files.write_outputs). The same
checks on a real grading run are in tests/e2e/test_report_e2e.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from grader.authoring.spec import Assignment, load_assignment
from grader.judging.performance import correctness_gate
from grader.publishing.files import write_outputs
from grader.results import CaseResult, GradeResult

HIDDEN_DESCRIPTION = "M, N, K primes (hidden shape 37x19x23)"
HIDDEN_ONLY_TRAP = "affine-ignored"


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def case(case_id: str, visibility: str, passed: bool, traps: tuple[str, ...] = (), title: str = "",
         points: float = 1.0) -> CaseResult:
    return CaseResult(case_id=case_id, target="layernorm_forward_kernel", title=title or f"ln: {case_id}",
                      visibility=visibility, max_score=points, score=points if passed else 0.0, passed=passed,
                      message=f"Failed: [{', '.join(traps)}] in {title or case_id}" if traps else "passed",
                      traps=traps, evidence={"dims": {"M": 37, "N": 19}} if visibility == "hidden" else {})


def result() -> GradeResult:
    cases = (
        case("ln-kernel-basic", "public", False, ("eps-outside-sqrt",)),
        case("ln-kernel-public-ok", "public", True),
        case("ln-kernel-primes", "hidden", False, ("eps-outside-sqrt", HIDDEN_ONLY_TRAP), HIDDEN_DESCRIPTION, 2.0),
        case("ln-kernel-secret-ok", "hidden", True, title="ln: the secret passing case", points=3.0),
    )
    return GradeResult(assignment="fused_layers", submission="fused_layers.py", backend="interpreter", seed=1,
                       versions={}, cases=cases, execution_time_s=1.0)


def visible_before_the_due_date(results: dict[str, Any]) -> str:
    """Everything of results.json a student can read before the due date, as one text."""
    top = {k: v for k, v in results.items() if k != "tests"}
    tests = [t for t in results["tests"] if t["visibility"] == "visible"]
    return json.dumps(top) + json.dumps(tests)


def written(tmp_path: Path, assignment: Assignment, graded: GradeResult) -> dict[str, Any]:
    write_outputs(tmp_path, graded, assignment, json.dumps({"tests": []}))  # the record, as text
    return json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))


def test_before_the_due_date_hidden_cases_are_a_count_with_their_points(tmp_path: Path,
                                                                       assignment: Assignment) -> None:
    results = written(tmp_path, assignment, result())
    seen = visible_before_the_due_date(results)
    for secret in ("ln-kernel-primes", "ln-kernel-secret-ok", HIDDEN_DESCRIPTION, "secret passing", "37x19",
                   HIDDEN_ONLY_TRAP, assignment.traps[HIDDEN_ONLY_TRAP].title, '"M": 37', "(hidden)"):
        assert secret not in seen, secret
    assert "2 hidden cases worth 5 points: results after the due date." in results["output"]
    assert "**Public cases: 1 / 2 points**" in results["output"]  # not 4 / 7: that would tell the hidden results
    assert results["extra_data"]["traps"] == ["eps-outside-sqrt"]
    assert results["extra_data"]["hidden_cases"] == {"count": 2, "points": 5.0}
    assert results["score"] == 4.0 and results["extra_data"]["max_score"] == 7.0  # the grade itself: all cases


def test_each_hidden_test_keeps_its_visibility_and_detail(tmp_path: Path, assignment: Assignment) -> None:
    results = written(tmp_path, assignment, result())
    by_id = {t["extra_data"]["case_id"]: t for t in results["tests"]}
    assert {i: t["visibility"] for i, t in by_id.items()} == {
        "ln-kernel-basic": "visible", "ln-kernel-public-ok": "visible",
        "ln-kernel-primes": "after_due_date", "ln-kernel-secret-ok": "after_due_date"}
    primes = by_id["ln-kernel-primes"]
    assert primes["name"] == HIDDEN_DESCRIPTION and HIDDEN_ONLY_TRAP in primes["tags"] and primes["max_score"] == 2
    # the instructor's files keep everything
    assert HIDDEN_DESCRIPTION in (tmp_path / "report.md").read_text(encoding="utf-8")
    grade = json.loads((tmp_path / "grade.json").read_text(encoding="utf-8"))
    assert HIDDEN_ONLY_TRAP in grade["traps"]


@pytest.mark.parametrize(("visibility", "when"), [("hidden", "results not shown"),
                                                  ("after_published", "results when grades are published")])
def test_the_count_says_when_hidden_results_come(tmp_path: Path, assignment: Assignment, visibility: str,
                                                  when: str) -> None:
    results = written(tmp_path, dataclasses.replace(assignment, hidden_visibility=visibility), result())
    assert f"2 hidden cases worth 5 points: {when}." in results["output"]
    assert {t["visibility"] for t in results["tests"] if t["extra_data"]["case_id"].startswith("ln-kernel-s")} == {
        visibility}
    assert "ln-kernel-primes" not in visible_before_the_due_date(results)


def test_a_result_without_hidden_cases_says_nothing_of_them(tmp_path: Path, assignment: Assignment) -> None:
    public = dataclasses.replace(result(), cases=result().cases[:2])
    results = written(tmp_path, assignment, public)
    assert "hidden" not in results["output"] and "**Score: 1 / 2**" in results["output"]
    assert results["extra_data"]["hidden_cases"] == {"count": 0, "points": 0.0}


def test_the_performance_gate_names_public_cases_and_counts_hidden_ones() -> None:
    cases = list(result().cases)
    reason = correctness_gate("layernorm_forward_kernel", cases)
    assert reason is not None and "ln-kernel-basic and 1 hidden case(s)" in reason
    assert "ln-kernel-primes" not in reason
    only_hidden = correctness_gate("layernorm_forward_kernel", [cases[1], cases[2]])
    assert only_hidden is not None and "layernorm_forward_kernel failed 1 hidden correctness case(s):" in only_hidden
    assert correctness_gate("layernorm_forward_kernel", [cases[1], cases[3]]) is None
