"""Performance cases on the CPU: the pure math (speedups, bandwidth, TFLOP/s, threshold points, the
correctness gate), the results model and every view of a fabricated timed result (results.json with its
leaderboard, grade.json, HTML, Markdown, terminal), the worker's "time" op run once through the
interpreter (the binding of kernels and wrappers to their inputs, without timing), and a real
`grader grade` on the interpreter, where every performance case is skipped, never passed or failed.
Timing itself needs a GPU: tests/e2e/test_gpu_performance.py."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from grader.authoring.spec import Assignment, PerformanceCase, Threshold, load_assignment
from grader.backends import Backend
from grader.judging.performance import (
    NEEDS_CUDA,
    SETTLED_BLOCKS,
    correctness_gate,
    evaluate,
    gb_per_s,
    leaderboard,
    measurement,
    not_run,
    pair_blocks,
    paired_speedup,
    settled,
    skipped,
    speedup,
    tflops,
    threshold_points,
)
from grader.publishing import report
from grader.publishing.gradescope import results_json
from grader.results import CaseResult, DeviceInfo, GradeResult, PerformanceResult
from grader.running import protocol
from grader.running.cases.battery import Battery
from grader.running.worker.measuring.samplers import Timing

H200 = DeviceInfo(gpu="NVIDIA H200", copy_gb_per_s=4000.0, torch="2.11.0+cu130", triton="3.6.0")
SCRIPT = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def perf_case(assignment: Assignment, perf_id: str, **changes) -> PerformanceCase:
    (found,) = [p for p in assignment.performance if p.id == perf_id]
    return dataclasses.replace(found, **changes)


# ------------------------------------------------------------------------------------------ the math


def test_speedup_is_their_time_over_yours() -> None:
    assert speedup(2.0, 1.0) == 2.0  # twice as fast as the bar
    assert speedup(1.0, 4.0) == 0.25
    with pytest.raises(ValueError):
        speedup(1.0, 0.0)


def test_samples_in_turn_compare_pair_by_pair() -> None:
    """A clock that wanders between rounds moves both samples of a round alike: the median pair's ratio is 1 for
    identical kernels, where the ratio of the two medians sets one round's sample against another's."""
    reference = [0.400, 0.430, 0.415, 0.445, 0.405]  # power-capped rounds, identical kernels: each pair agrees
    student = [0.401, 0.429, 0.416, 0.444, 0.404]
    assert paired_speedup(reference, student) == pytest.approx(1.0, abs=0.003)
    assert paired_speedup([2.0, 8.0], [1.0, 1.0]) == 4.0  # two rounds are one block: their geometric mean
    assert paired_speedup([2.0, 8.0, 3.0], [1.0, 1.0, 1.0]) == 3.5  # an odd last round stands alone
    with pytest.raises(ValueError):
        paired_speedup([1.0], [1.0, 1.0])


def test_a_timing_in_turn_settles_once_whole_blocks_agree() -> None:
    """Two blocks of two rounds within 0.5% of their median end a timing in turn (more rounds would not move its
    speedup); fewer, an unfinished block, or blocks apart do not. Round ratios recorded on an H100 (reference copies,
    docs/gpu-runs-2026-12-06.txt): the row statistics settle, the power-capped matmul does not."""
    def rounds(ratios: list[float]) -> tuple[list[float], list[float]]:
        return [1.0 * r for r in ratios], [1.0] * len(ratios)  # the bar's samples over the student's: the ratios

    assert pair_blocks([2.0, 8.0, 3.0], [1.0, 1.0, 1.0]) == [4.0, 3.0]
    row_stats = [1.001, 1.004, 1.001, 1.001, 1.000, 1.000, 1.001, 1.001, 1.001, 1.000]
    matmul = [0.943, 1.016, 1.018, 1.034, 1.007, 0.977, 0.985, 0.960, 0.982, 0.974]
    assert SETTLED_BLOCKS == 2
    assert not settled(*rounds(row_stats[:2])) and not settled(*rounds(row_stats[:3]))  # one block is no agreement
    assert settled(*rounds(row_stats[:4])) and settled(*rounds(row_stats[:5]))  # the 5th round's block is unfinished
    assert not any(settled(*rounds(matmul[:n])) for n in range(1, 11))  # 0.979, 1.026, ...: never within 0.5%
    bar, student = rounds([1.0, 1.0, 1.0, 1.0])
    assert settled(bar, student) and not settled(bar, student[:3])  # whole blocks of both sides only
    assert not settled([1.0, 1.0, 1.006, 1.006], [1.0] * 4) and settled([1.0, 1.0, 1.004, 1.004], [1.0] * 4)


def test_going_first_favours_neither_side() -> None:
    """A GPU at its power cap times the first of a round's samples apart from the second (an H100: the first ~4%
    slower): with the order alternating round by round, identical kernels read 1 however large that is, where the
    pairs' plain median would read it."""
    first, second = 0.42, 0.40  # whoever goes first gets 0.42
    student = [first if r % 2 == 0 else second for r in range(10)]  # the student first in even rounds
    reference = [second if r % 2 == 0 else first for r in range(10)]
    assert paired_speedup(reference, student) == pytest.approx(1.0)
    jittered = [t * (1 + 0.01 * ((7 * r) % 5 - 2)) for r, t in enumerate(student)]  # each block its own clock
    assert paired_speedup([t * j / s for t, j, s in zip(reference, jittered, student, strict=True)], jittered) \
        == pytest.approx(1.0)


def test_evaluate_pairs_a_reference_timed_in_turn(assignment: Assignment) -> None:
    perf = perf_case(assignment, "perf-layernorm")
    # The same kernel on both sides, the clock drifting 10% over five rounds; one jitter in round 3 makes the
    # reference's median round 4 while the student's is round 3: the medians' ratio reads 2.4%, the pairs' 0.
    reference = measurement("reference", [0.40, 0.41, 0.435, 0.43, 0.44], None, None, None)
    student = measurement("yours", [0.40, 0.41, 0.42, 0.43, 0.44], None, None, None)
    apart = evaluate(perf, student, reference, None, H200)
    in_turn = evaluate(perf, student, reference, None, H200, reference_in_turn=True)
    assert apart.speedup_vs_reference == pytest.approx(0.43 / 0.42)
    assert in_turn.speedup_vs_reference == pytest.approx(1.0)


def test_bandwidth_and_tflops_units() -> None:
    # 8192x8192 float32 read and written in 0.1354 ms: 3.96 TB/s
    assert gb_per_s(2 * 8192 * 8192 * 4, 0.1354) == pytest.approx(3965.07, rel=1e-5)
    # a 4096^3 matmul in 0.4381 ms: 313.7 TFLOP/s (docs/performance.md)
    assert tflops(2 * 4096**3, 0.4381) == pytest.approx(313.7, rel=1e-3)


def test_threshold_points_take_the_highest_threshold_reached() -> None:
    thresholds = [(0.5, 1.0), (0.8, 2.0), (1.0, 3.0)]
    assert threshold_points(thresholds, 0.49) == 0
    assert threshold_points(thresholds, 0.5) == 1  # reaching a threshold counts
    assert threshold_points(thresholds, 0.95) == 2
    assert threshold_points(thresholds, 4.0) == 3
    assert threshold_points(thresholds, None) == 0  # no bar measured
    assert threshold_points([], 10.0) == 0  # informational case


def test_measurement_median_spread_and_throughput() -> None:
    m = measurement(
        "reference", [0.100, 0.104, 0.102, 0.098, 0.101], nbytes=400_000_000, flops=None, copy_gb_per_s=4000.0
    )
    assert m.median_ms == pytest.approx(0.101)
    assert m.spread_pct == pytest.approx(100 * 0.003 / 0.101)  # half the range, % of the median
    assert m.gb_per_s == pytest.approx(400_000_000 / 0.101e-3 / 1e9)
    assert m.pct_of_copy_bandwidth == pytest.approx(100 * m.gb_per_s / 4000.0)
    assert m.tflops is None
    even = measurement("x", [1.0, 3.0], nbytes=None, flops=2 * 10**9, copy_gb_per_s=None)
    assert even.median_ms == 2.0 and even.tflops == pytest.approx(1.0) and even.gb_per_s is None
    with pytest.raises(ValueError):
        measurement("x", [], None, None, None)


def test_worker_timing_median_and_spread_match_the_report() -> None:
    t = Timing((0.100, 0.104, 0.102, 0.098, 0.101))
    m = measurement("x", t.medians_ms, None, None, None)
    assert t.median_ms == pytest.approx(m.median_ms) and t.spread_pct == pytest.approx(m.spread_pct)


def case(target: str, passed: bool, case_id: str = "c") -> CaseResult:
    return CaseResult(
        case_id=case_id,
        target=target,
        title=case_id,
        visibility="public",
        max_score=1.0,
        score=float(passed),
        passed=passed,
        message="",
    )


def test_correctness_gate_needs_every_case_of_the_target_to_pass() -> None:
    assert (
        correctness_gate("layernorm", [case("layernorm", True, "a"), case("row_mean_var", False, "b")])
        is None
    )
    reason = correctness_gate("layernorm", [case("layernorm", True, "a"), case("layernorm", False, "ln-eps")])
    assert reason is not None and "ln-eps" in reason and "layernorm" in reason
    assert "no correctness case" in (correctness_gate("layernorm", [case("row_mean_var", True)]) or "")


def timed_result(
    assignment: Assignment, perf_id: str = "perf-layernorm", student_ms: float = 0.2, **changes
) -> PerformanceResult:
    perf = perf_case(assignment, perf_id, **changes)
    nbytes = 4 * (2 * 8192 * 8192 + 2 * 8192)
    student = measurement(f"your {perf.target}", [student_ms] * 4 + [student_ms * 1.01], nbytes, None, 4000.0)
    reference = measurement("reference", [0.1354] * 5, nbytes, None, 4000.0)
    torch_eager = measurement("F.layer_norm", [0.2215] * 5, nbytes, None, 4000.0)
    return evaluate(perf, student, reference, torch_eager, H200)


def test_evaluate_scores_against_the_reference_or_torch(assignment: Assignment) -> None:
    thresholds = (Threshold(0.5, 1.0), Threshold(0.8, 2.0))
    slow = timed_result(assignment, student_ms=0.2, thresholds=thresholds)  # 0.68x the reference
    assert slow.timed and slow.score == 1 and slow.max_score == 2
    assert slow.speedup_vs_reference == pytest.approx(0.1354 / 0.2)
    assert slow.speedup_vs_torch == pytest.approx(0.2215 / 0.2)
    vs_torch = timed_result(assignment, student_ms=0.2, thresholds=thresholds, relative_to="torch")  # 1.1x
    assert vs_torch.score == 2
    informational = timed_result(assignment)
    assert informational.score == 0 and informational.max_score == 0


def test_skipped_cases_count_nothing_untimed_ones_count_zero(assignment: Assignment) -> None:
    perf = perf_case(assignment, "perf-layernorm", thresholds=(Threshold(1.0, 3.0),))
    assert skipped(perf).max_score == 0 and skipped(perf).reason == NEEDS_CUDA
    assert not_run(perf, "failed").max_score == 3 and not_run(perf, "failed").score == 0
    base = GradeResult(
        assignment="fused_layers",
        submission="s.py",
        backend="interpreter",
        seed=1,
        versions={},
        cases=(case("layernorm", True),),
        execution_time_s=1.0,
    )
    assert dataclasses.replace(base, performance=(skipped(perf),)).max_score == 1
    assert dataclasses.replace(base, performance=(not_run(perf, "x"),)).max_score == 4
    timed = dataclasses.replace(timed_result(assignment, student_ms=0.1), max_score=3.0, score=3.0)
    assert dataclasses.replace(base, performance=(timed,)).score == 4


def test_leaderboard_has_time_and_speedup_of_timed_cases_only(assignment: Assignment) -> None:
    perf = perf_case(assignment, "perf-row-mean-var")
    board = leaderboard([timed_result(assignment), skipped(perf), not_run(perf, "failed")])
    assert board == [
        {"name": "perf-layernorm (ms)", "value": 0.2, "order": "asc"},
        {"name": "perf-layernorm speedup vs torch", "value": round(0.2215 / 0.2, 3), "order": "desc"},
    ]


def test_a_time_past_the_physical_floor_is_refused_and_flagged(assignment: Assignment) -> None:
    """The case's 537 MB at the measured 4000 GB/s take at least 0.134 ms: 0.1 ms (134%) is past the 125% margin
    (refused, 0 points, no leaderboard entry, flagged); 0.12 ms (112%, a read-heavy kernel can beat a copy) is a
    time."""
    thresholds = (Threshold(0.5, 1.0), Threshold(0.8, 2.0))
    honest = timed_result(assignment, student_ms=0.12, thresholds=thresholds)
    assert honest.timed and honest.score == 2 and honest.student.pct_of_speed_of_light == pytest.approx(112, abs=1)
    forged = timed_result(assignment, student_ms=0.1, thresholds=thresholds)
    assert forged.status == "error" and forged.trap == "faster-than-hardware" and forged.score == 0
    assert forged.max_score == 2 and forged.student is not None and forged.student.median_ms == 0.1
    assert "faster than this GPU can move the data" in forged.reason and "134%" in forged.reason
    assert leaderboard([forged]) == []
    assert graded(assignment, (forged,)).flags == ("faster-than-hardware",)
    assert graded(assignment, (honest,)).flags == ()


# ------------------------------------------------------------------------------------------ results and views


def graded(assignment: Assignment, performance: tuple[PerformanceResult, ...]) -> GradeResult:
    return GradeResult(
        assignment="fused_layers",
        submission="fused_layers.py",
        backend="cuda:NVIDIA H200",
        seed=3,
        versions={"torch": "2.11.0"},
        cases=(case("layernorm", True, "ln-basic"),),
        execution_time_s=12.0,
        performance=performance,
    )


def fabricated(assignment: Assignment) -> GradeResult:
    return graded(
        assignment,
        (
            timed_result(assignment),
            not_run(perf_case(assignment, "perf-row-mean-var"), f"row_mean_var failed {SCRIPT}"),
            skipped(perf_case(assignment, "perf-linear-gelu")),
        ),
    )


def test_perf_results_round_trip_through_grade_json(assignment: Assignment) -> None:
    result = fabricated(assignment)
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert [p["status"] for p in data["performance"]] == ["timed", "not-run", "skipped"]
    assert data["performance"][0]["device"]["gpu"] == "NVIDIA H200"
    assert GradeResult.from_dict(data) == result
    old = {k: v for k, v in data.items() if k != "performance"}  # grade.json written before performance
    assert GradeResult.from_dict(old).performance == ()


def test_results_json_has_performance_and_leaderboard(assignment: Assignment) -> None:
    result = fabricated(assignment)
    out = json.loads(json.dumps(results_json(result, assignment, "summary"), allow_nan=False))
    perf = out["extra_data"]["performance"]
    assert perf["device"] == H200.to_dict()
    assert [c["perf_id"] for c in perf["cases"]] == [
        "perf-layernorm",
        "perf-row-mean-var",
        "perf-linear-gelu",
    ]
    assert perf["cases"][0]["student"]["median_ms"] == pytest.approx(0.2)
    assert {e["name"] for e in out["leaderboard"]} == {
        "perf-layernorm (ms)",
        "perf-layernorm speedup vs torch",
    }
    assert len(out["tests"]) == 1  # informational performance cases are not Gradescope tests
    assert out["score"] == 1


def test_performance_points_are_a_gradescope_test(assignment: Assignment) -> None:
    scored = dataclasses.replace(
        timed_result(assignment, thresholds=(Threshold(0.5, 1.0), Threshold(0.8, 2.0)))
    )
    out = results_json(graded(assignment, (scored,)), assignment, "summary")
    test = out["tests"][-1]
    assert (test["score"], test["max_score"], test["status"]) == (1.0, 2.0, "passed")
    assert test["extra_data"]["case_id"] == "perf-layernorm" and "performance" in test["tags"]
    assert "0.2000 ms" in test["output"] and "1 / 2 points" in test["output"]
    assert out["score"] == 2 and out["extra_data"]["max_score"] == 3


def test_no_leaderboard_without_timed_cases(assignment: Assignment) -> None:
    result = graded(assignment, (skipped(perf_case(assignment, "perf-layernorm")),))
    out = results_json(result, assignment, "summary")
    assert "leaderboard" not in out
    assert out["extra_data"]["performance"]["device"] is None


def test_html_markdown_and_terminal_show_the_numbers(assignment: Assignment) -> None:
    result = fabricated(assignment)
    html = report.html(result, assignment)
    assert (
        'id="performance"' in html and 'data-perf="perf-layernorm"' in html and 'data-status="timed"' in html
    )
    assert "0.2000 ms" in html and "1.11x" in html and "0.68x" in html  # time, vs torch, vs reference
    assert "% of copy bandwidth" in html and "NVIDIA H200" in html and "4000 GB/s" in html
    assert "skipped: " + NEEDS_CUDA in html and "not-run: row_mean_var failed" in html
    assert SCRIPT not in html and "&lt;script&gt;" in html  # reasons are escaped
    markdown = report.markdown(result, assignment, show_hidden_details=False)
    assert "## Performance" in markdown and "| 0.2000 ms ±" in markdown and "1.11x" in markdown
    assert SCRIPT not in markdown
    terminal = report.terminal(result, assignment)
    assert (
        "performance (NVIDIA H200" in terminal
        and "perf-layernorm" in terminal
        and "0.68x reference" in terminal
    )


def test_reports_have_no_performance_section_without_performance_cases(assignment: Assignment) -> None:
    result = graded(assignment, ())
    assert 'id="performance"' not in report.html(result, assignment)
    assert "## Performance" not in report.markdown(result, assignment)


def test_performance_line_for_each_status(assignment: Assignment) -> None:
    assert report.performance_line(skipped(perf_case(assignment, "perf-layernorm"))) == "skipped: " + NEEDS_CUDA
    line = report.performance_line(timed_result(assignment))
    assert (
        line.startswith("0.2000 ms ±")
        and "F.layer_norm 0.2215 ms" in line
        and "the reference (0.1354 ms)" in line
    )


# ------------------------------------------------------------------------------------------ a real grade


@pytest.mark.slow
def test_interpreter_grade_skips_performance_cases(reference_graded, assignment: Assignment) -> None:
    """On the interpreter every performance case is reported as skipped (needs a CUDA GPU): not a test,
    no leaderboard, no points either way; the correctness grade is untouched."""
    results = reference_graded.results
    assert results["score"] == results["extra_data"]["max_score"] == 40
    perf = results["extra_data"]["performance"]
    assert [c["perf_id"] for c in perf["cases"]] == [p.id for p in assignment.performance]
    assert all(c["status"] == "skipped" and c["reason"] == NEEDS_CUDA for c in perf["cases"])
    assert all(c["score"] == 0 == c["max_score"] and c["student"] is None for c in perf["cases"])
    assert "leaderboard" not in results
    assert all("performance" not in t["tags"] for t in results["tests"])
    grade = json.loads((reference_graded.out_dir / "grade.json").read_text(encoding="utf-8"))
    assert [p["status"] for p in grade["performance"]] == ["skipped"] * len(assignment.performance)
    pytest_report = json.loads((reference_graded.out_dir / "pytest-report.json").read_text(encoding="utf-8"))
    perf_tests = [t for t in pytest_report["tests"] if "metadata" in t and "performance" in t["metadata"]]
    assert len(perf_tests) == len(assignment.performance)
    assert all(t["outcome"] == "skipped" for t in perf_tests)
    assert "## Performance" in (reference_graded.out_dir / "report.md").read_text(encoding="utf-8")


# -------------------------------------------------------------------- the CUDA path, on a fake clock


class Clocked:
    """A worker whose timing replies carry medians, as a CUDA worker's do (the interpreter never times)."""

    def __init__(self, worker, ms: float) -> None:
        self.worker = worker
        self.ms = ms

    def __getattr__(self, name: str):
        return getattr(self.worker, name)

    def request(self, message, timeout, what):
        reply = self.worker.request(message, timeout, what)
        if isinstance(message, (protocol.TimeLaunches, protocol.TimeKept)) and reply.ok and message.repeats:
            reply = dataclasses.replace(reply, medians_ms=(self.ms,) * message.repeats)
        return reply


@pytest.mark.slow
@pytest.mark.parametrize(
    ("bug", "status"),
    [
        (None, "timed"),
        (("y = x_norm * gamma + beta", "y = x_norm * gamma + beta + (row >= 4) * 1.0"), "error"),
        (  # right values at the timed size, from torch: the kind of switch a leaderboard invites
            ("eps, BLOCK_N=block_n, num_warps=num_warps,\n    )\n    return out",
             "eps, BLOCK_N=block_n, num_warps=num_warps,\n    )\n"
             "    return torch.nn.functional.layer_norm(x, (N,), weight, bias, eps)"),
            "error",
        ),
    ],
)
def test_measure_path_on_a_fake_clock(
    monkeypatch,
    assignment: Assignment,
    repo_root: Path,
    tmp_path: Path,
    planted,
    reference_source,
    bug,
    status,
) -> None:
    """Everything a CUDA run does but reading the clock, on the interpreter: the student's worker
    records the launches at the timed size, a timer worker that loaded only the kernels runs them (its
    medians injected), the reference the same way in its worker, torch eager here on the CPU; the
    output check at the timed size (a bug only on rows >= 4 is caught there), speedups, bandwidth and
    threshold points."""
    from grader.running.processes.client import Worker, WorkerOptions
    from grader.running.timing import runner as timing_runner

    source = planted(*bug) if bug else reference_source
    submission = tmp_path / "fused_layers.py"
    submission.write_text(source, encoding="utf-8")
    battery = Battery(assignment, submission, "interpreter", 1)
    battery.backend = Backend.CUDA
    perf = PerformanceCase(
        id="p-ln",
        target="layernorm",
        dims={"M": 6, "N": 37},
        tolerance="rowwise",
        thresholds=(Threshold(1.0, 1.0), Threshold(1.1, 2.0)),
        repeats=3,
    )
    runner = timing_runner.PerformanceRunner(assignment, 1, device="cpu", perfs=[perf])
    runner._copy_gb_per_s = H200.copy_gb_per_s
    timer_for = runner.contestants.timer_for
    monkeypatch.setattr(runner.contestants, "timer_for", lambda b: Clocked(timer_for(b), 0.1))
    monkeypatch.setattr(runner, "_time_eager", lambda baseline, inputs, perf: [0.2] * perf.repeats)

    def new_reference():  # started by the runner, which sends it the same requests as on CUDA
        worker = Worker(
            repo_root / "reference" / "fused_layers" / "reference.py",
            list(assignment.required_symbols),
            WorkerOptions(backend="interpreter", import_timeout_s=60),
        )
        return Clocked(worker, 0.12)

    monkeypatch.setattr(runner.contestants, "new_reference", new_reference)
    try:
        result = runner.run(perf, battery, [case("layernorm", True)])
    finally:
        runner.close()
        battery.close()
    assert result.status == status, result.reason
    if bug:
        expected = "not fused at this size" if "layer_norm(" in bug[1] else "differs from F.layer_norm"
        assert expected in result.reason and result.score == 0 and result.max_score == 2, result.reason
        return
    # timed in turn with the reference: the clock's samples never vary, so the timing settles after its first two
    # blocks of two rounds (judging.performance.settled), and both workers let their graphs go then
    assert result.student is not None and result.student.medians_ms == (0.1,) * (2 * SETTLED_BLOCKS)
    assert result.reference is not None and result.reference.medians_ms == (0.12,) * (2 * SETTLED_BLOCKS)
    assert result.speedup_vs_reference == pytest.approx(1.2) and result.speedup_vs_torch == pytest.approx(2.0)
    assert result.student.gb_per_s == pytest.approx(4 * (2 * 6 * 37 + 2 * 37) / 0.1e-3 / 1e9)
    assert result.student.pct_of_copy_bandwidth == pytest.approx(100 * result.student.gb_per_s / 4000.0)
    assert result.torch is not None and result.torch.label == "F.layer_norm"
    assert result.reference is not None and result.reference.median_ms == pytest.approx(0.12)
    assert "timed in turn" in result.reason  # the reference's samples came in turn with the student's
    assert (result.score, result.max_score) == (2.0, 2.0)
    assert result.device is not None and result.device.copy_gb_per_s == H200.copy_gb_per_s


class BreaksInTurn(Clocked):
    """A timer that dies at the first sample taken in turn (a held graph), as no timer should."""

    def request(self, message, timeout, what):
        if isinstance(message, protocol.TimeKept) and message.hold:
            from grader.running.processes.client import WorkerFailure

            self.worker.stop()
            raise WorkerFailure("crash", "the worker died while timing (exit code 71)")
        return super().request(message, timeout, what)


@pytest.mark.slow
def test_a_timer_that_fails_in_turn_is_timed_alone_against_the_bars(
    monkeypatch, assignment: Assignment, repo_root: Path, tmp_path: Path, reference_source) -> None:
    """Timing in turn is a refinement: when it fails, a fresh timer keeps the case's launches again and times
    them alone, against the reference's calibrated bar, and the result says so; the next case is timed too."""
    battery, runner = clocked_runner(monkeypatch, assignment, repo_root, tmp_path, reference_source, 2,
                                     timer=BreaksInTurn)
    perfs = runner.perfs
    try:
        results = [runner.run(perf, battery, [case("layernorm", True)]) for perf in perfs]
    finally:
        runner.close()
        battery.close()
    for result in results:
        assert result.status == "timed", result.reason
        assert result.student is not None and result.student.medians_ms == (0.1, 0.1, 0.1)
        assert result.speedup_vs_reference == pytest.approx(1.2)  # the calibrated bar: 0.12 ms
        assert "timing in turn with the reference failed" in result.reason and "exit code 71" in result.reason


class TimesOutFirst(Clocked):
    """A timer whose first case's first sample in turn does not finish (a kernel far past 100x the reference's time):
    the worker is killed at its deadline, as the grader's client does."""

    def request(self, message, timeout, what):
        if isinstance(message, protocol.TimeKept) and message.hold and message.key == "p-ln1":
            from grader.running.processes.client import WorkerFailure

            self.worker.stop()
            raise WorkerFailure("timeout", "did not finish within 12 s (killed)")
        return super().request(message, timeout, what)


@pytest.mark.slow
def test_a_sample_that_times_out_is_that_cases_timeout_and_the_next_is_timed_in_turn(
    monkeypatch, assignment: Assignment, repo_root: Path, tmp_path: Path, reference_source) -> None:
    """The student's own first sample past its deadline is the case's verdict (a timeout, once: not a second wait
    timing it alone), and it does not stop the grade's later cases from being timed in turn with the reference."""
    battery, runner = clocked_runner(monkeypatch, assignment, repo_root, tmp_path, reference_source, 2,
                                     timer=TimesOutFirst)
    try:
        first, second = (runner.run(perf, battery, [case("layernorm", True)]) for perf in runner.perfs)
    finally:
        runner.close()
        battery.close()
    assert first.status == "error" and first.trap == "timeout", first
    assert "did not finish within 12 s" in first.reason
    assert second.status == "timed" and "timed in turn" in second.reason, second.reason
    assert second.student is not None and len(second.student.medians_ms) == 2 * SETTLED_BLOCKS  # settled


@pytest.mark.slow
def test_a_case_the_grader_fails_to_time_says_so_and_the_others_are_timed(
    monkeypatch, assignment: Assignment, repo_root: Path, tmp_path: Path, reference_source) -> None:
    """A defect of the grader's while timing one case (here: an error nobody foresaw) is that case's line, named;
    the grade's other cases are still timed, and nothing is measured twice."""
    battery, runner = clocked_runner(monkeypatch, assignment, repo_root, tmp_path, reference_source, 3)
    measure = runner._measure_again_for_memory
    measured: list[str] = []

    def fails_on_the_second(prepared, battery):
        measured.append(prepared.perf.id)
        if prepared.perf.id == "p-ln2":
            raise ValueError("a timing of 0 ms")
        return measure(prepared, battery)

    monkeypatch.setattr(runner, "_measure_again_for_memory", fails_on_the_second)
    try:
        results = [runner.run(perf, battery, [case("layernorm", True)]) for perf in runner.perfs]
    finally:
        runner.close()
        battery.close()
    assert [r.status for r in results] == ["timed", "error", "timed"], [r.reason for r in results]
    assert results[1].reason.startswith("the grader failed while timing this case (ValueError: a timing of 0 ms)")
    assert "a grader problem, not your code" in results[1].reason
    assert measured == ["p-ln1", "p-ln2", "p-ln3"]


@pytest.mark.slow
def test_a_check_short_of_memory_in_the_graders_process_costs_that_case_alone(
    monkeypatch, assignment: Assignment, repo_root: Path, tmp_path: Path, reference_source) -> None:
    """torch eager's outputs at the timed size are made in the grader's own process; where the GPU's memory runs out
    there (another process held it), the check runs again after each wait (running/timing/memory_retry.py); still
    short, that case says it was the machine's problem and the next case is checked and timed in turn as usual."""
    from grader.running.timing import memory_retry

    slept: list[float] = []
    pause = memory_retry.time.sleep

    def sleep(seconds: float) -> None:  # the retries' waits are counted, not waited; the workers' polls still pause
        if seconds >= 1:
            slept.append(seconds)
        else:
            pause(seconds)

    monkeypatch.setattr(memory_retry.time, "sleep", sleep)
    battery, runner = clocked_runner(monkeypatch, assignment, repo_root, tmp_path, reference_source, 2)
    eager = runner._eager_outputs

    def short_once(baseline, inputs, perf):
        if perf.id == "p-ln1":
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return eager(baseline, inputs, perf)

    monkeypatch.setattr(runner, "_eager_outputs", short_once)
    try:
        first, second = (runner.run(perf, battery, [case("layernorm", True)]) for perf in runner.perfs)
    finally:
        runner.close()
        battery.close()
    assert first.status == "error" and first.reason.startswith(
        "the GPU ran out of memory while the grader was checking this case (CUDA out of memory. Tried to allocate "
        "2.00 GiB): a problem of the machine, not your code"), first.reason
    assert slept == list(memory_retry.MEMORY_RETRY_WAITS_S)
    assert second.status == "timed" and "timed in turn" in second.reason, second.reason


def test_a_failure_before_any_case_is_timed_is_every_cases_line_once(
    monkeypatch, assignment: Assignment, tmp_path: Path, reference_source) -> None:
    """Where measuring fails before any case has a result, every case says why, and the second case does not start
    the whole measurement again (it used to, and lost what the first had timed)."""
    from grader.running.timing import runner as timing_runner

    perfs = [PerformanceCase(id=f"p-ln{i}", target="layernorm", dims={"M": 6, "N": 37}, tolerance="rowwise",
                             repeats=3) for i in (1, 2)]
    runner = timing_runner.PerformanceRunner(assignment, 1, device="cpu", perfs=perfs)
    calls: list[int] = []

    def broken(battery, cases, results=None):
        calls.append(1)
        raise KeyError("dims")

    monkeypatch.setattr(runner, "measure_all", broken)

    class OnGpu:  # all `run` asks of a battery before measuring
        backend = Backend.CUDA

    try:
        results = [runner.run(perf, OnGpu(), [case("layernorm", True)]) for perf in perfs]
    finally:
        runner.close()
    assert calls == [1]
    for result in results:
        assert result.status == "error"
        assert result.reason.startswith("the grader failed while timing this grade's cases (KeyError: 'dims')")


def test_nothing_measured_is_one_line_not_a_table(assignment: Assignment) -> None:
    result = graded(assignment, tuple(skipped(p) for p in assignment.performance))
    line = f"{len(assignment.performance)} performance cases not measured: needs a CUDA GPU"
    for text in (
        report.markdown(result, assignment),
        report.html(result, assignment),
        report.terminal(result, assignment),
    ):
        assert line in text
        assert "your time" not in text and "perf-layernorm " not in text




def clocked_runner(monkeypatch, assignment: Assignment, repo_root: Path, tmp_path: Path, reference_source: str,
                   cases: int, timer: type[Clocked] | None = None) -> tuple[Battery, Any]:
    """A CUDA-shaped timing session on the CPU: the reference as the student, `cases` LayerNorm cases (p-ln1...),
    a timer (`timer`, default Clocked) whose samples read 0.1 ms, the reference's 0.12 ms, torch eager's 0.2 ms."""
    from grader.running.processes.client import Worker, WorkerOptions
    from grader.running.timing import runner as timing_runner

    submission = tmp_path / "fused_layers.py"
    submission.write_text(reference_source, encoding="utf-8")
    battery = Battery(assignment, submission, "interpreter", 1)
    battery.backend = Backend.CUDA
    perfs = [PerformanceCase(id=f"p-ln{i}", target="layernorm", dims={"M": 6, "N": 37}, tolerance="rowwise",
                             repeats=3) for i in range(1, cases + 1)]
    runner = timing_runner.PerformanceRunner(assignment, 1, device="cpu", perfs=perfs)
    runner._copy_gb_per_s = H200.copy_gb_per_s
    timer_for = runner.contestants.timer_for
    wrap = timer or Clocked
    monkeypatch.setattr(runner.contestants, "timer_for", lambda b: wrap(timer_for(b), 0.1))
    monkeypatch.setattr(runner, "_time_eager", lambda baseline, inputs, perf: [0.2] * perf.repeats)
    monkeypatch.setattr(runner.contestants, "new_reference", lambda: Clocked(Worker(
        repo_root / "reference" / "fused_layers" / "reference.py", list(assignment.required_symbols),
        WorkerOptions(backend="interpreter", import_timeout_s=60)), 0.12))
    return battery, runner


class StepsProfiler:
    """A Profiler as `measure_all` drives it, noting each step, its thread and how many timing checks had ended."""

    def __init__(self, checks: list[str]) -> None:
        self.checks, self.steps = checks, []

    def _note(self, step: str, cases) -> None:
        ids = [c if isinstance(c, str) else c.perf.id for c in cases]
        self.steps.append((step, threading.current_thread() is threading.main_thread(), len(self.checks), ids))

    def spawn(self, perf_ids) -> None:
        self._note("spawn", perf_ids)

    def prepare_student(self, cases) -> None:
        self._note("prepare_student", cases)

    def prepare_reference(self, cases) -> None:
        self._note("prepare_reference", cases)

    def prepare(self, cases) -> None:
        self._note("prepare", cases)

    def measure(self, perf_ids) -> None:
        self._note("measure", perf_ids)

    def finish(self, cases) -> dict:
        self._note("finish", cases)
        return {}

    def close(self) -> None:
        self.steps.append(("close", True, len(self.checks), []))


def measured_with_steps(monkeypatch, battery: Battery, runner: Any, wrong: str = "") -> tuple[dict, StepsProfiler]:
    """`runner.measure_all` on one passed LayerNorm case, its profiler a StepsProfiler that counts the timing checks
    (the case `wrong`, if named, differs from torch eager at the timed size); the runner and battery closed after."""
    from grader.running.timing import runner as timing_runner

    checks: list[str] = []
    check = runner._check

    def noted_check(prepared, battery):
        checks.append(prepared.perf.id)
        if prepared.perf.id == wrong:
            return timing_runner.errored(prepared.perf, "differs from F.layer_norm")
        return check(prepared, battery)

    monkeypatch.setattr(runner, "_check", noted_check)
    steps = StepsProfiler(checks)
    monkeypatch.setattr(runner, "_profiler", lambda battery: steps)
    try:
        return runner.measure_all(battery, [case("layernorm", True)]), steps
    finally:
        runner.close()
        battery.close()


@pytest.mark.slow
def test_the_students_profiling_worker_prepares_beside_the_timing_checks(
    monkeypatch, assignment: Assignment, repo_root: Path, tmp_path: Path, reference_source) -> None:
    """The student's side of the profiled replay needs nothing of the checks, so it runs on a thread beside
    them; the reference's side waits for the plans the checks make; only the cases whose outputs were right at
    the timed size are profiled."""

    battery, runner = clocked_runner(monkeypatch, assignment, repo_root, tmp_path, reference_source, 2)
    results, steps = measured_with_steps(monkeypatch, battery, runner, wrong="p-ln2")  # timed and profiled never
    assert results["p-ln1"].status == "timed" and results["p-ln2"].status != "timed"
    by_step = {step: (on_main, checks_done, ids) for step, on_main, checks_done, ids in steps.steps}
    assert by_step["spawn"] == (True, 0, ["p-ln1", "p-ln2"])
    on_main, _, ids = by_step["prepare_student"]
    assert not on_main and ids == ["p-ln1", "p-ln2"]  # beside the checks, on the pool's thread
    assert by_step["prepare_reference"] == (True, 2, ["p-ln1"])  # after every check, on the plans they made
    assert by_step["measure"] == (True, 2, ["p-ln1"]) and by_step["finish"] == (True, 2, ["p-ln1"])
    assert [s[0] for s in steps.steps][-1] == "close"


class ClockedPerCase(Clocked):
    """A timer whose samples read `SLOW_MS` for p-ln1 and the usual 0.1 ms for the rest (the reference: 0.12 ms)."""

    SLOW_MS = 0.3

    def request(self, message, timeout, what):
        reply = super().request(message, timeout, what)
        if isinstance(message, protocol.TimeKept) and message.key == "p-ln1" and reply.ok and message.repeats:
            reply = dataclasses.replace(reply, medians_ms=(self.SLOW_MS,) * message.repeats)
        return reply


@pytest.mark.slow
@pytest.mark.parametrize("slow_ms", [0.3, 0.1])
def test_a_batch_profiles_only_the_cases_whose_counters_could_name_a_trap(
    monkeypatch, assignment: Assignment, repo_root: Path, tmp_path: Path, reference_source, slow_ms) -> None:
    """Profiling only where needed (a batch's way): nothing starts under Nsight Compute with the checks; after the
    timing, only the case measurably slower than the reference (p-ln1 at 0.3 ms against 0.12) is profiled, in a hold
    of the slot of its own, and the others' profiles say why their counters were not needed. Where no case is slower,
    no profiler starts at all."""
    monkeypatch.setattr(ClockedPerCase, "SLOW_MS", slow_ms)
    battery, runner = clocked_runner(monkeypatch, assignment, repo_root, tmp_path, reference_source, 2,
                                     timer=ClockedPerCase)
    runner.profile_every_case = False
    results, steps = measured_with_steps(monkeypatch, battery, runner)
    assert results["p-ln1"].status == results["p-ln2"].status == "timed"
    assert results["p-ln1"].student.median_ms == pytest.approx(slow_ms)
    names = [step for step, *_ in steps.steps]
    assert "spawn" not in names and "prepare_student" not in names and names[-1] == "close"
    assert runner.profiles["p-ln2"].not_needed == "0.83x the reference's time" and not runner.profiles["p-ln2"].student
    if slow_ms > 0.12:
        by_step = {step: (checks_done, ids) for step, _, checks_done, ids in steps.steps}
        assert by_step["prepare"] == by_step["measure"] == by_step["finish"] == (2, ["p-ln1"])
        assert "p-ln1" not in runner.profiles  # the fake profiler's finish gave nothing: no line made up for it
    else:
        assert names == ["close"] and runner.profiles["p-ln1"].not_needed == "0.83x the reference's time"


@pytest.mark.slow
def test_a_reference_started_with_the_correctness_cases_is_the_one_timed_in_turn(
    monkeypatch, assignment: Assignment, repo_root: Path, tmp_path: Path, reference_source) -> None:
    """GradingRun starts the reference's worker as correctness starts (its imports off the timing phase's path);
    the timing phase adopts that worker instead of starting another, and closing the runner closes one never used."""
    from grader.running.timing import runner as timing_runner

    battery, runner = clocked_runner(monkeypatch, assignment, repo_root, tmp_path, reference_source, 1)
    (perf,) = runner.perfs
    started: list[Clocked] = []
    reference = runner.contestants.new_reference

    def new_reference():
        started.append(reference())
        return started[-1]

    monkeypatch.setattr(runner.contestants, "new_reference", new_reference)
    try:
        runner.start_reference_early()
        runner.start_reference_early()  # once
        assert len(started) == 1
        result = runner.run(perf, battery, [case("layernorm", True)])
    finally:
        runner.close()
        battery.close()
    assert len(started) == 1 and "timed in turn" in result.reason, result.reason
    assert result.reference is not None and result.reference.median_ms == pytest.approx(0.12)

    unused = timing_runner.PerformanceRunner(assignment, 1, device="cpu", perfs=[perf])
    monkeypatch.setattr(unused.contestants, "new_reference", new_reference)
    unused.start_reference_early()
    early = started[-1]
    unused.close()  # correctness failed, nothing was timed: the early worker is closed with the runner
    assert not early.alive


def test_an_early_reference_that_cannot_start_is_tried_once_and_left_to_the_timing_phase(
        assignment: Assignment, monkeypatch) -> None:
    from grader.running.timing import runner as timing_runner

    runner = timing_runner.PerformanceRunner(assignment, 1, device="cpu", perfs=[])
    tries: list[int] = []

    def broken():
        tries.append(1)
        raise OSError("no more processes")

    monkeypatch.setattr(runner.contestants, "new_reference", broken)
    try:
        runner.start_reference_early()  # the grade's first correctness case goes on
        runner.start_reference_early()
    finally:
        runner.close()
    assert tries == [1] and runner._early_reference is None


@pytest.mark.slow
@pytest.mark.parametrize("fails", [False, True], ids=["compiled", "timer-failed"])
def test_the_timer_compiles_each_recorded_case_beside_the_recordings_before_any_check(
    monkeypatch, assignment: Assignment, repo_root: Path, tmp_path: Path, reference_source, fails: bool) -> None:
    """Each case's kernels go to the timer to compile as soon as the case is recorded, on a thread of their own (the
    student's worker records the next case meanwhile), and every compile has ended before the first check. A timer
    that failed at it is dropped, and the checks start another: the cases are still timed."""
    battery, runner = clocked_runner(monkeypatch, assignment, repo_root, tmp_path, reference_source, 2)
    recorded: list[str] = []
    record = runner._record_fairly

    def noted_record(perf, battery):
        recorded.append(perf.id)
        return record(perf, battery)

    compiles: list[tuple[list[str], bool, int]] = []
    checks: list[str] = []

    def compile_ahead(timer, ready) -> bool:
        compiles.append(([p.perf.id for p in ready], threading.current_thread() is threading.main_thread(),
                         len(recorded)))
        return not fails

    dropped: list[bool] = []
    drop = runner.contestants.drop_timer

    def noted_drop() -> None:
        dropped.append(len(checks) == 0)
        drop()

    monkeypatch.setattr(runner, "_record_fairly", noted_record)
    monkeypatch.setattr(runner.contestants, "compile_ahead", compile_ahead)
    monkeypatch.setattr(runner.contestants, "drop_timer", noted_drop)
    check = runner._check

    def noted_check(prepared, battery):
        checks.append(prepared.perf.id)
        assert len(compiles) == 2  # every case's compile ended before the first check
        return check(prepared, battery)

    monkeypatch.setattr(runner, "_check", noted_check)
    runner.profile = False
    try:
        results = runner.measure_all(battery, [case("layernorm", True)])
    finally:
        runner.close()
        battery.close()
    assert sorted(ids for ids, _, _ in compiles) == [["p-ln1"], ["p-ln2"]]
    assert all(not on_main and after >= 1 for _, on_main, after in compiles)
    assert [ids for ids, _, after in compiles if after == 1] in ([["p-ln1"]], [])  # p-ln1's, while p-ln2 recorded
    assert results["p-ln1"].status == results["p-ln2"].status == "timed"
    assert dropped[:1] == ([True] if fails else [])  # dropped before any check, once
