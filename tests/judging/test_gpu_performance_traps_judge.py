"""A cuda grade's profiled replays judged (judge_profiles): student against reference at the times the timing slot
measured, one trap per target from its slowest case, counters summarised for the reports, a note where the
counters are missing (the static facts still speak), and the % of speed of light from the GPU's roofs."""

from __future__ import annotations

import dataclasses

import pytest

from grader import trap_ids
from grader.evidence.kernel_profiles import CaseProfile, SideProfile, StaticFacts
from grader.judging.gpu_performance_traps import counters_can_name_a_trap, judge_profiles, reconcile, why_not_needed
from grader.judging.performance import measurement
from grader.results import DeviceInfo, PerformanceResult, PerformanceTrap
from grader.running.profiling.ncu import parse_ncu_csv
from tests import ncu_profiles as runs
from tests.ncu_profiles import Run, csv_text

PLAIN = StaticFacts(tensor_cores=False, vector_loads=True, registers=32, spills=0)
DEVICE = DeviceInfo("NVIDIA H200", 4243.0, "2.11", "3.6", matmul_tflops=380.0)


def timed(perf_id: str, target: str, mine_ms: float, theirs_ms: float, nbytes: int | None = runs.ROW_BYTES,
          flops: int | None = None) -> PerformanceResult:
    mine = measurement(f"your {target}", [mine_ms], nbytes, flops, DEVICE.copy_gb_per_s, DEVICE.matmul_tflops)
    theirs = measurement("reference", [theirs_ms], nbytes, flops, DEVICE.copy_gb_per_s, DEVICE.matmul_tflops)
    return PerformanceResult(perf_id, target, perf_id, {"M": 8192, "N": 8192}, "float32", "timed", student=mine,
                             reference=theirs, speedup_vs_reference=theirs_ms / mine_ms, device=DEVICE)


def profile(perf_id: str, target: str, mine: Run, theirs: Run, static: StaticFacts = PLAIN) -> CaseProfile:
    return CaseProfile(perf_id, target, SideProfile(parse_ncu_csv(csv_text(mine)), {"k": static}),
                       SideProfile(parse_ncu_csv(csv_text(theirs)), {"k": PLAIN}))


def test_a_slower_kernel_is_named_from_its_counters_with_numbers() -> None:
    result = timed("perf-row", "row_mean_var", 0.187, 0.061)
    found = judge_profiles([result], {"perf-row": profile("perf-row", "row_mean_var", runs.ROW_THREE_PASSES,
                                                          runs.ROW_REFERENCE)})
    assert [t.trap for t in found.traps] == [trap_ids.RE_READING]
    trap = found.traps[0]
    assert trap.basis == "measured" and trap.numbers["time_ratio"] == pytest.approx(0.187 / 0.061, rel=1e-3)
    assert "803 MB" in trap.message and "268 MB" in trap.message and "(case perf-row)" in trap.message
    counters = found.counters["perf-row"]
    assert counters["student"]["dram_bytes"] > 2.9 * counters["reference"]["dram_bytes"]
    assert counters["reference"]["sectors_per_load"] == pytest.approx(16)
    (attached,) = found.attach([result])
    assert attached.counters == counters and found.notes == ()


def test_the_timing_slot_decides_slower_not_ncus_durations() -> None:
    # ncu's durations say 3x slower, but the timed medians are within 10%: nothing is named
    result = timed("perf-row", "row_mean_var", 0.064, 0.061)
    found = judge_profiles([result], {"perf-row": profile("perf-row", "row_mean_var", runs.ROW_THREE_PASSES,
                                                          runs.ROW_REFERENCE)})
    assert found.traps == () and "perf-row" in found.counters


def test_one_trap_per_target_from_its_slowest_case() -> None:
    slow, slower = timed("perf-a", "layernorm", 0.187, 0.061), timed("perf-b", "layernorm", 0.300, 0.061)
    profiles = {p: profile(p, "layernorm", runs.ROW_THREE_PASSES, runs.ROW_REFERENCE) for p in ("perf-a", "perf-b")}
    found = judge_profiles([slow, slower], profiles)
    assert [t.trap for t in found.traps] == [trap_ids.RE_READING]
    assert found.traps[0].message.endswith("(case perf-b)")
    assert found.comparisons["layernorm"].case_id == "perf-b"


def test_without_counters_the_static_facts_still_name_spills_and_the_reason_is_a_note() -> None:
    result = timed("perf-row", "row_mean_var", 0.300, 0.061)
    spilling = StaticFacts(tensor_cores=False, vector_loads=False, registers=255, spills=96)
    why = "Nsight Compute is not permitted to read the GPU's counters on this machine (ERR_NVGPUCTRPERM)"
    unread = CaseProfile("perf-row", "row_mean_var", SideProfile((), {"k": spilling}), SideProfile((), {"k": PLAIN}),
                         why)
    found = judge_profiles([result], {"perf-row": unread})
    assert [t.trap for t in found.traps] == [trap_ids.REGISTER_SPILLS]
    assert found.notes == (f"GPU counters: {why}",)
    assert found.counters["perf-row"]["student"] == {"spills": 96.0}


def test_untimed_or_unprofiled_cases_are_left_alone() -> None:
    untimed = PerformanceResult("perf-x", "softmax", "x", {"M": 1}, "float32", "error", reason="boom")
    found = judge_profiles([untimed, timed("perf-y", "softmax", 1.0, 0.1)],
                           {"perf-x": profile("perf-x", "softmax", runs.ROW_SEGMENTS, runs.ROW_REFERENCE)})
    assert found == type(found)()


def test_the_measurement_wins_over_the_prediction() -> None:
    result = timed("perf-row", "row_mean_var", 0.062, 0.061)  # as fast as the reference
    found = judge_profiles([result], {"perf-row": profile("perf-row", "row_mean_var", runs.ROW_REFERENCE,
                                                          runs.ROW_REFERENCE)})
    predicted = PerformanceTrap(trap_ids.RE_READING, "row_mean_var", "loads x 3 times", {"reads": 3.0})
    merged = reconcile([predicted], found.traps, found.comparisons)
    assert merged.traps == ()
    assert merged.notes and "the CPU predicted `re-reading` but the GPU measured otherwise" in merged.notes[0]


def test_counters_are_needed_only_where_a_trap_could_be_named() -> None:
    """A batch profiles a timed case only where the student is measurably slower than the reference timed beside it
    (or that reference's time is unknown): within 10% no counter can name a trap."""
    assert counters_can_name_a_trap(timed("perf-a", "layernorm", 0.200, 0.100))
    assert counters_can_name_a_trap(timed("perf-a", "layernorm", 0.111, 0.100))
    assert not counters_can_name_a_trap(timed("perf-a", "layernorm", 0.108, 0.100))
    assert not counters_can_name_a_trap(timed("perf-a", "layernorm", 0.050, 0.100))
    alone = dataclasses.replace(timed("perf-a", "layernorm", 0.5, 0.1), reference=None)
    assert counters_can_name_a_trap(alone)
    untimed = PerformanceResult("perf-x", "softmax", "x", {"M": 1}, "float32", "error", reason="boom")
    assert not counters_can_name_a_trap(untimed)
    assert why_not_needed(timed("perf-a", "layernorm", 0.098, 0.100)) == "0.98x the reference's time"


def test_one_time_ratio_serves_the_comparison_and_the_profile_decision() -> None:
    from grader.judging.gpu_performance_traps import time_ratio, timed_ratio

    assert time_ratio(0.2, 0.1) == 2.0 and time_ratio(0.0, 0.1) == 0.0 and time_ratio(0.2, 0.0) == 0.0
    assert timed_ratio(timed("perf-a", "layernorm", 0.150, 0.100)) == pytest.approx(1.5)
    assert timed_ratio(dataclasses.replace(timed("perf-a", "layernorm", 0.5, 0.1), reference=None)) == 0.0


def test_cases_whose_counters_were_not_needed_are_one_note_and_still_contradict_a_guess() -> None:
    """Cases profiled only where needed: the others carry no counters, one note names them with their times, and
    their times alone still overrule a CPU prediction for their target (as fast as the reference: nothing slow)."""
    fast = timed("perf-ln", "layernorm", 0.099, 0.100)
    small = timed("perf-ln-small", "layernorm", 0.0102, 0.0100)
    slow = timed("perf-row", "row_mean_var", 0.187, 0.061)
    profiles = {"perf-ln": CaseProfile("perf-ln", "layernorm", not_needed="0.99x the reference's time"),
                "perf-ln-small": CaseProfile("perf-ln-small", "layernorm", not_needed="1.02x the reference's time"),
                "perf-row": profile("perf-row", "row_mean_var", runs.ROW_THREE_PASSES, runs.ROW_REFERENCE)}
    found = judge_profiles([fast, small, slow], profiles)
    assert [t.trap for t in found.traps] == [trap_ids.RE_READING]
    assert set(found.counters) == {"perf-row"}
    (note,) = found.notes
    assert note.startswith("GPU counters: not read for perf-ln (0.99x the reference's time), perf-ln-small (1.02x")
    assert "within 10% of the reference's time no trap can be named" in note
    assert found.comparisons["layernorm"].time_ratio == pytest.approx(0.0102 / 0.0100)  # its slowest case
    predicted = PerformanceTrap(trap_ids.LAUNCH_BOUND, "layernorm", "loads in 16-element chunks", {})
    merged = reconcile([predicted], found.traps, found.comparisons)
    assert [t.trap for t in merged.traps] == [trap_ids.RE_READING]
    assert "the CPU predicted `launch-bound` but the GPU measured otherwise: it ran in 1.02x" in merged.notes[0]


def test_speed_of_light_takes_the_tighter_roof() -> None:
    memory = measurement("x", [0.1], nbytes=400_000_000, flops=None, copy_gb_per_s=4000.0)
    assert memory.pct_of_speed_of_light == pytest.approx(100.0)  # 400 MB at 4000 GB/s is 0.1 ms
    matmul = measurement("x", [0.5], nbytes=200_000_000, flops=runs.FLOPS_4096, copy_gb_per_s=4000.0,
                         matmul_tflops=400.0)
    assert matmul.pct_of_speed_of_light == pytest.approx(100 * runs.FLOPS_4096 / 400e12 / 0.5e-3, rel=1e-3)
    unroofed = measurement("x", [0.5], nbytes=None, flops=runs.FLOPS_4096, copy_gb_per_s=4000.0)
    assert unroofed.pct_of_speed_of_light is None  # flops alone need a measured matmul roof
