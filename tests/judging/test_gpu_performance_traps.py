"""Measured performance traps: each slow kernel of issue 28 gets exactly its trap(s), the reference and a kernel
within 10% of it get none, and reconcile keeps the GPU's verdict over the CPU's prediction."""

from __future__ import annotations

from dataclasses import replace

import pytest

from grader import trap_ids
from grader.evidence.kernel_profiles import StaticFacts
from grader.judging.gpu_performance_traps import (
    DEFAULT_THRESHOLDS,
    Comparison,
    Side,
    Thresholds,
    compare,
    diagnose,
    reconcile,
)
from grader.results import PerformanceTrap
from grader.running.profiling.ncu import parse_ncu_csv
from tests import ncu_profiles as runs
from tests.ncu_profiles import FLOPS_4096, Run, csv_text

TENSOR_CODE = StaticFacts(tensor_cores=True, vector_loads=True, registers=168, spills=0)


def side(run: Run, static: StaticFacts | None = None, time_s: float | None = None) -> Side:
    """A side as the grader would have it: the run's ncu CSV text, parsed."""
    return Side(parse_ncu_csv(csv_text(run)), static, time_s)


def row(student: Run) -> Comparison:
    return compare("row_mean_var", side(student), side(runs.ROW_REFERENCE), case_id="perf-8192x8192")


def matmul(student: Run, static: StaticFacts | None = TENSOR_CODE) -> Comparison:
    return compare("fused_linear_gelu", side(student, static), side(runs.MM_REFERENCE, TENSOR_CODE),
                   case_id="perf-4096", matmul=True, flops=FLOPS_4096)


def ids(comparison: Comparison, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> list[str]:
    return [t.trap for t in diagnose(comparison, thresholds)]


@pytest.mark.parametrize(("student", "expected"), [
    (runs.ROW_REFERENCE, []),
    (runs.ROW_CLOSE, []),  # 64 us against 61: within 10%
    (runs.ROW_SEGMENTS, [trap_ids.UNCOALESCED_ACCESS]),  # 32 sectors per request against 16
    (runs.ROW_ONE_WARP, [trap_ids.LOW_OCCUPANCY]),  # 43% against 95%, one warp per program
    (runs.ROW_THREE_PASSES, [trap_ids.RE_READING]),  # 803 MB read against 268
    (runs.ROW_SERIAL, [trap_ids.SERIAL_GRID]),  # grid (1,): its low occupancy is the grid's doing
], ids=["reference", "within-10%", "segments", "one-warp", "three-passes", "grid-of-one"])
def test_each_row_kernel_gets_exactly_its_traps(student: Run, expected: list[str]) -> None:
    assert ids(row(student)) == expected


@pytest.mark.parametrize(("student", "static", "expected"), [
    (runs.MM_REFERENCE, TENSOR_CODE, []),
    (runs.MM_BROADCAST, TENSOR_CODE, []),  # tensor pipe 30%: no no-tensor-cores; 809 MB is 2.3x, not several
    (runs.MM_TINY_TILES, TENSOR_CODE, [trap_ids.LOW_ARITHMETIC_INTENSITY]),  # 9,010 MB against 348
    (runs.MM_OUTER_PRODUCTS, replace(TENSOR_CODE, tensor_cores=False), [trap_ids.NO_TENSOR_CORES]),
    (runs.MM_SPILLING, replace(TENSOR_CODE, spills=312, registers=255), [trap_ids.REGISTER_SPILLS]),
], ids=["reference", "broadcast-sum", "16x16x16", "outer-products", "spilling"])
def test_each_matmul_gets_exactly_its_traps(student: Run, static: StaticFacts, expected: list[str]) -> None:
    assert ids(matmul(student, static)) == expected


def test_findings_are_measured_and_carry_their_numbers() -> None:
    (segments,) = diagnose(row(runs.ROW_SEGMENTS))
    assert segments.basis == "measured" and segments.target == "row_mean_var"
    assert segments.numbers["sectors_per_request"] == 32 and segments.numbers["reference_sectors_per_request"] == 16
    assert segments.numbers["time_ratio"] == pytest.approx(281 / 61, abs=1e-3)
    assert "touch 32 sectors of 32 bytes per request where the reference's touch 16" in segments.message
    assert "4.6x the reference's time (281 us against 61 us)" in segments.message
    assert segments.message.endswith("(case perf-8192x8192)")
    (tiny,) = diagnose(matmul(runs.MM_TINY_TILES))
    assert tiny.numbers["ratio"] == pytest.approx(9010 / 348, abs=1e-3)
    assert "9.0 GB through DRAM for the same flops as the reference's 348 MB: 26x the bytes" in tiny.message
    (one_warp,) = diagnose(row(runs.ROW_ONE_WARP))
    assert "achieved occupancy 43% of the SM's warps where the reference reaches 95%" in one_warp.message
    assert "one warp of 32 threads" in one_warp.message
    (serial,) = diagnose(row(runs.ROW_SERIAL))
    assert "a grid of 1 program keeps one SM of the GPU's 132 busy where the reference launches 8,192" in \
        serial.message
    assert PerformanceTrap.from_dict(serial.to_dict()) == serial


def test_a_kernel_within_ten_percent_gets_no_trap_whatever_its_counters() -> None:
    close_but_scattered = replace(runs.ROW_SEGMENTS, time_us=66.0)  # 1.08x
    assert ids(row(close_but_scattered)) == []
    assert ids(row(replace(runs.ROW_SEGMENTS, time_us=68.0))) == [trap_ids.UNCOALESCED_ACCESS]  # 1.11x
    assert ids(row(runs.ROW_SEGMENTS), Thresholds(slower=5.0)) == []


def test_the_timed_median_is_the_time_where_given() -> None:
    timed = compare("row_mean_var", side(runs.ROW_SEGMENTS, time_s=64e-6), side(runs.ROW_REFERENCE, time_s=61e-6))
    assert timed.time_ratio == pytest.approx(64 / 61) and diagnose(timed) == ()
    unknown = compare("row_mean_var", Side(()), side(runs.ROW_REFERENCE))
    assert unknown.time_ratio == 0.0 and diagnose(unknown) == ()


def test_thresholds_are_data() -> None:
    assert ids(row(runs.ROW_THREE_PASSES), Thresholds(rereads=3.5)) == []
    assert ids(row(runs.ROW_SEGMENTS), Thresholds(sectors_floor=40)) == []
    assert ids(row(runs.ROW_SEGMENTS), Thresholds(min_requests=1e9)) == []
    assert ids(row(runs.ROW_ONE_WARP), Thresholds(occupancy_gap=60)) == []
    assert ids(matmul(runs.MM_TINY_TILES), Thresholds(traffic_ratio=30)) == []


def test_a_matmul_names_its_traffic_low_intensity_not_re_reading() -> None:
    as_rows = compare("fused_linear_gelu", side(runs.MM_TINY_TILES), side(runs.MM_REFERENCE))
    assert ids(as_rows) == [trap_ids.RE_READING]
    assert ids(matmul(runs.MM_TINY_TILES)) == [trap_ids.LOW_ARITHMETIC_INTENSITY]


def test_no_tensor_cores_from_the_sass_where_the_pipe_was_not_measured() -> None:
    unmeasured = replace(runs.MM_OUTER_PRODUCTS, tensor_pipe=None)
    no_mma = replace(TENSOR_CODE, tensor_cores=False)
    assert ids(matmul(unmeasured, no_mma)) == [trap_ids.NO_TENSOR_CORES]
    assert ids(matmul(unmeasured, TENSOR_CODE)) == []
    assert ids(matmul(unmeasured, None)) == []  # nothing known: nothing named
    # the measured pipe decides over the SASS: the broadcast-sum's SASS read wrongly still gets nothing
    assert ids(matmul(runs.MM_BROADCAST, no_mma)) == []


def test_the_time_weighted_totals_of_several_launches() -> None:
    two = Side(parse_ncu_csv(csv_text(runs.ROW_REFERENCE, runs.ROW_ONE_WARP)))
    totals = compare("t", two, two).student
    assert totals.launches == 2 and totals.kernels == ("row_mean_var_kernel",)
    assert totals.time_s == pytest.approx((61 + 167) * 1e-6)
    assert totals.dram_read == 2 * runs.ROW_BYTES
    assert totals.occupancy == pytest.approx((95 * 61 + 43 * 167) / (61 + 167))
    assert (totals.programs, totals.threads) == (8192, 32)  # the longest launch's


def predicted(trap: str, target: str) -> PerformanceTrap:
    return PerformanceTrap(trap, target, f"predicted {trap}", {})


def test_reconcile_keeps_the_gpu_verdict_and_says_why_the_prediction_went() -> None:
    broadcast = matmul(runs.MM_BROADCAST)
    measured = diagnose(broadcast)
    result = reconcile([predicted(trap_ids.NO_TENSOR_CORES, "fused_linear_gelu")], measured,
                       {"fused_linear_gelu": broadcast})
    assert result.traps == ()
    (note,) = result.notes
    assert note.startswith("fused_linear_gelu: the CPU predicted `no-tensor-cores` but the GPU measured otherwise: "
                           "the tensor pipe was 30% active (the reference's 81%): Triton compiled the products "
                           "onto the tensor cores")


def test_reconcile_lets_a_confirmed_prediction_give_way_and_keeps_unmeasured_targets() -> None:
    one_warp = row(runs.ROW_ONE_WARP)
    measured = diagnose(one_warp)
    unmeasured = predicted(trap_ids.RE_READING, "layernorm")
    result = reconcile([predicted(trap_ids.LAUNCH_BOUND, "row_mean_var"), unmeasured], measured,
                       {"row_mean_var": one_warp})
    assert result.traps == (*measured, unmeasured) and result.notes == ()
    tiny = matmul(runs.MM_TINY_TILES)
    confirmed = reconcile([predicted(trap_ids.RE_READING, "fused_linear_gelu")], diagnose(tiny),
                          {"fused_linear_gelu": tiny})
    assert [t.trap for t in confirmed.traps] == [trap_ids.LOW_ARITHMETIC_INTENSITY] and confirmed.notes == ()


@pytest.mark.parametrize(("trap", "student", "said"), [
    (trap_ids.RE_READING, runs.ROW_SEGMENTS, "it read 271 MB from DRAM against the reference's 268 MB: the caches"),
    (trap_ids.UNCOALESCED_ACCESS, runs.ROW_THREE_PASSES, "its loads touched 16 sectors per request against the "
                                                         "reference's 16"),
    (trap_ids.LAUNCH_BOUND, runs.ROW_THREE_PASSES, "its longest launch ran 8,192 programs of 256 threads, achieved "
                                                   "occupancy 94%"),
    (trap_ids.UNCOALESCED_ACCESS, runs.ROW_CLOSE, "it ran in 1.05x the reference's time, within the 10%"),
])
def test_reconcile_notes_name_what_was_measured_instead(trap: str, student: Run, said: str) -> None:
    comparison = row(student)
    result = reconcile([predicted(trap, "row_mean_var")], diagnose(comparison), {"row_mean_var": comparison})
    assert trap not in [t.trap for t in result.traps]
    (note,) = result.notes
    assert said in note
