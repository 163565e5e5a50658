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
           requests: int = 125, dots: int = 0, name: str = "x_ptr", programs: int = 4, runs: int = 1,
           loads: int = 4, stores: int = 4, block: int = 256) -> dict[str, Any]:
    """One launch's counts as the worker reports them (grader/running/worker/traffic.py): by default 4
    programs, each one load and one store of a 256-element block."""
    return {"kernel": kernel, "programs": programs, "runs": runs, "dots": dots,
            "load": {"bytes": loaded, "requests": requests, "sectors": sectors, "min_sectors": fewest,
                     "calls": loads, "block_lanes": loads * block},
            "store": {"bytes": 0, "requests": 0, "sectors": 0, "min_sectors": 0,
                      "calls": stores, "block_lanes": stores * block},
            "storages": [{"name": name, "loaded": loaded, "program_distinct": needed}]}


def case(target: str = "k", traffic: Any = None, passed: bool = True, case_id: str = "c") -> CaseResult:
    evidence: Mapping[str, Any] = {} if traffic is None else {"traffic": traffic}
    return CaseResult(case_id, target, f"{target}: {case_id}", "public", 1.0, 1.0 if passed else 0.0, passed, "",
                      evidence=evidence)


def named(cases: list[CaseResult], matmul: tuple[str, ...] = (),
          wrappers: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    return [(f.trap, f.target) for f in diagnose(cases, matmul, wrapper_targets=wrappers)]


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


def looping(block: int, calls_per_program: int, programs: int = 4) -> dict[str, Any]:
    """A launch whose programs each issue `calls_per_program` loads and stores of `block` elements."""
    half = calls_per_program * programs // 2
    return launch("rows", programs=programs, loads=half, stores=half, block=block)


def test_tiny_blocks_looping_are_launch_bound_on_a_wrapper_only() -> None:
    tiny = [case("softmax", [looping(16, 80)], case_id="long-rows")]
    assert named(tiny, wrappers=("softmax",)) == [(trap_ids.LAUNCH_BOUND, "softmax")]
    assert named(tiny) == []  # a kernel case runs the grid and blocks the grader chose
    (found,) = diagnose(tiny, wrapper_targets=("softmax",))
    assert "in case `long-rows` each program ran 80 loads and stores" in found.message
    assert "covering 16 elements" in found.message and found.numbers["block"] == 16.0


def test_a_short_row_in_one_small_block_is_no_loop_and_a_full_block_loop_is_fine() -> None:
    assert named([case("softmax", [looping(16, 2)])], wrappers=("softmax",)) == []  # N = 10: one block
    assert named([case("softmax", [looping(1024, 15)])], wrappers=("softmax",)) == []  # the reference's chunks
    assert named([case("softmax", [looping(128, 40)])], wrappers=("softmax",)) == []  # one element per thread


def test_tiny_blocks_are_judged_on_the_case_that_loops_most() -> None:
    # many short-row cases with whole-row blocks do not hide the one case that loops in chunks of 32
    cases = [case("ln", [looping(1024, 2, programs=64)], case_id=f"short-{i}") for i in range(5)]
    cases.append(case("ln", [looping(32, 24)], case_id="wide"))
    (found,) = diagnose(cases, wrapper_targets=("ln",))
    assert found.trap == trap_ids.LAUNCH_BOUND and "`wide`" in found.message


def test_one_program_for_the_whole_tensor_is_launch_bound() -> None:
    one = [case("softmax", [looping(1024, 18, programs=1)], case_id=f"c{i}") for i in range(3)]
    assert named(one, wrappers=("softmax",)) == [(trap_ids.LAUNCH_BOUND, "softmax")]
    (found,) = diagnose(one, wrapper_targets=("softmax",))
    assert "grid of one program" in found.message and f"{DEFAULT_THRESHOLDS.sms} SMs" in found.message
    # a small matmul in one tile: a grid of one that stores once is what the case's size gives
    tile = [case("mm", [launch("mm", programs=1, loads=8, stores=1)], case_id=f"c{i}") for i in range(3)]
    assert named(tile, wrappers=("mm",)) == []
    # one case with a grid of several programs: the wrapper spreads work where there is some
    spread = one + [case("softmax", [looping(1024, 18, programs=9)], case_id="wide")]
    assert named(spread, wrappers=("softmax",)) == []


def test_an_autotuned_launch_runs_its_grid_once_per_config() -> None:
    # 3 configs of a one-tile grid: 3 programs in 3 runs, still a grid of one
    tuned = [case("mm", [launch("mm", programs=3, runs=3, loads=24, stores=24)], case_id=f"c{i}") for i in range(2)]
    assert named(tuned, wrappers=("mm",)) == [(trap_ids.LAUNCH_BOUND, "mm")]


def test_many_launches_per_call_are_launch_bound() -> None:
    per_row = [case("softmax", [launch("rows", programs=1, loads=1, stores=1) for _ in range(9)])]
    (found,) = diagnose(per_row, wrapper_targets=("softmax",))
    assert found.trap == trap_ids.LAUNCH_BOUND and "9.0 kernel launches per call" in found.message
    assert named([case("softmax", [launch(), launch()])], wrappers=("softmax",)) == []


def test_traffic_without_call_counts_names_no_launch_bound() -> None:
    old = launch()
    for side in ("load", "store"):
        del old[side]["calls"], old[side]["block_lanes"]
    del old["runs"]
    assert named([case("softmax", [old])], wrappers=("softmax",)) == []


def test_thresholds_are_data() -> None:
    evidence = [case(traffic=[launch(loaded=8000, needed=4000)])]
    assert named(evidence) == []
    assert [f.trap for f in diagnose(evidence, thresholds=Thresholds(rereads=1.5))] == [trap_ids.RE_READING]
    assert DEFAULT_THRESHOLDS.rereads > 2.0  # a chunked row kernel's two reads are never named
    tiny = [case("softmax", [looping(128, 40)])]
    assert named(tiny, wrappers=("softmax",)) == []
    assert [f.trap for f in diagnose(tiny, thresholds=Thresholds(program_threads=256),
                                     wrapper_targets=("softmax",))] == [trap_ids.LAUNCH_BOUND]


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
