"""grader/judging/performance_traps.py: performance traps named from counted traffic (pure), on crafted
evidence; then one mutant graded end to end through the CLI, and the reference beside it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from grader import trap_ids
from grader.authoring.catalog import generic_traps
from grader.judging.performance_traps import DEFAULT_THRESHOLDS, Thresholds, collect, diagnose
from grader.results import CaseResult
from tests.conftest import Graded, corpus_mutant


def launch(kernel: str = "k", *, loaded: int = 4000, needed: int = 4000, sectors: int = 500, fewest: int = 500,
           requests: int = 125, dots: int = 0, name: str = "x_ptr") -> dict[str, Any]:
    """One launch's counts as the worker reports them (grader/running/worker/traffic.py)."""
    return {"kernel": kernel, "programs": 4, "dots": dots,
            "load": {"bytes": loaded, "requests": requests, "sectors": sectors, "min_sectors": fewest},
            "store": {"bytes": 0, "requests": 0, "sectors": 0, "min_sectors": 0},
            "storages": [{"name": name, "loaded": loaded, "program_distinct": needed}]}


def case(target: str = "k", traffic: Any = None, passed: bool = True, case_id: str = "c") -> CaseResult:
    evidence: Mapping[str, Any] = {} if traffic is None else {"traffic": traffic}
    return CaseResult(case_id, target, f"{target}: {case_id}", "public", 1.0, 1.0 if passed else 0.0, passed, "",
                      evidence=evidence)


def named(cases: list[CaseResult], matmul: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    return [(f.trap, f.target) for f in diagnose(cases, matmul)]


def test_a_kernel_that_reads_once_coalesced_gets_nothing() -> None:
    assert named([case(traffic=[launch()])]) == []


def test_three_reads_of_a_row_are_re_reading_two_are_not() -> None:
    assert named([case(traffic=[launch(loaded=12000, needed=4000)])]) == [(trap_ids.RE_READING, "k")]
    assert named([case(traffic=[launch(loaded=8000, needed=4000)])]) == []  # statistics, then output


def test_re_reading_message_gives_the_numbers() -> None:
    (found,) = diagnose([case(traffic=[launch(loaded=3_000_000, needed=1_000_000)])])
    assert "`x_ptr` 3.0 times" in found.message and "3.0 MB loaded for the 1.0 MB" in found.message
    assert found.numbers["reads"] == 3.0 and found.basis == "prediction"


def test_a_small_tensor_read_again_is_no_re_reading() -> None:
    # gamma read 4 times per program, but its extra bytes are 3% of what the launch needs
    big, small = launch(loaded=40000, needed=40000), launch(loaded=400, needed=100, name="gamma_ptr")
    big["storages"] += small["storages"]
    assert named([case(traffic=[big])]) == []


def test_scattered_lanes_are_uncoalesced_access() -> None:
    assert named([case(traffic=[launch(sectors=4000, fewest=500)])]) == [(trap_ids.UNCOALESCED_ACCESS, "k")]
    assert named([case(traffic=[launch(sectors=1400, fewest=500)])]) == []  # 2.8x: short, unaligned rows


def test_too_few_requests_name_no_pattern() -> None:
    assert named([case(traffic=[launch(sectors=80, fewest=10, requests=10)])]) == []


def test_no_tensor_cores_only_on_a_matmul_target_without_tl_dot() -> None:
    assert named([case("mm", [launch("mm")])], matmul=("mm",)) == [(trap_ids.NO_TENSOR_CORES, "mm")]
    assert named([case("mm", [launch("mm", dots=8)])], matmul=("mm",)) == []
    assert named([case("rows", [launch("rows")])], matmul=("mm",)) == []


def test_failed_and_uncounted_cases_are_no_evidence() -> None:
    slow = [launch(loaded=12000, needed=4000)]
    assert named([case(traffic=slow, passed=False), case(traffic=None), case(traffic=[])]) == []


def test_cases_of_a_target_are_summed_so_the_large_ones_weigh_most() -> None:
    cases = [case(traffic=[launch(loaded=300, needed=100)], case_id="tiny"),
             case(traffic=[launch(loaded=40000, needed=40000)], case_id="large")]
    counted = collect(cases)["k"]
    assert counted.cases == 2 and counted.loaded["x_ptr"] == 40300
    assert named(cases) == []


def test_thresholds_are_data() -> None:
    evidence = [case(traffic=[launch(loaded=8000, needed=4000)])]
    assert named(evidence) == []
    assert [f.trap for f in diagnose(evidence, thresholds=Thresholds(rereads=1.5))] == [trap_ids.RE_READING]
    assert DEFAULT_THRESHOLDS.rereads > 2.0  # a chunked row kernel's two reads are never named


def test_every_performance_trap_has_catalog_text() -> None:
    for trap in trap_ids.PERFORMANCE:
        text = generic_traps()[trap]
        assert text.title and text.explanation and text.fix


# ------------------------------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def broadcast_sum(grade_text: Any) -> Graded:
    mutant, text = corpus_mutant("linear_broadcast_sum")
    assert mutant.performance_traps == (trap_ids.NO_TENSOR_CORES,)
    return grade_text(text)


@pytest.mark.slow
def test_a_matmul_without_tl_dot_gets_full_marks_and_no_tensor_cores(broadcast_sum: Graded) -> None:
    results = broadcast_sum.results
    assert results["score"] == results["extra_data"]["max_score"]
    assert results["extra_data"]["performance_traps"] == [trap_ids.NO_TENSOR_CORES]
    assert results["extra_data"]["traps"] == []  # informational: no correctness trap, no points off
    grade = json.loads((broadcast_sum.out_dir / "grade.json").read_text(encoding="utf-8"))
    assert {t["target"] for t in grade["performance_traps"]} == {"fused_linear_gelu_kernel", "fused_linear_gelu"}
    report = (broadcast_sum.out_dir / "report.md").read_text(encoding="utf-8")
    assert "### Why it may be slow" in report and "no tl.dot ran in" in report


@pytest.mark.slow
def test_the_reference_gets_no_performance_trap(reference_graded: Graded) -> None:
    assert reference_graded.results["extra_data"]["performance_traps"] == []
    grade = json.loads((reference_graded.out_dir / "grade.json").read_text(encoding="utf-8"))
    counted = [c for c in grade["cases"] if "traffic" in c["evidence"]]
    assert counted  # the interpreter counted every kernel and wrapper case
