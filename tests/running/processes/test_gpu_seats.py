"""grader/running/processes/gpu_seats.py: how many grades may hold timing tensors at once, and seats that hold
across threads and processes and free themselves when their holder dies."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from grader.running.processes.gpu_memory import CUDA_CONTEXT_BYTES, GiB, MiB
from grader.running.processes.gpu_seats import (
    HEADROOM,
    PLANNED_HEADROOM,
    SEAT_UNITS,
    TIMING_PROCESSES,
    UNDECLARED_CASE_BYTES,
    TimedCaseBytes,
    TimingSeats,
    host_budget_bytes,
    planned_footprint_bytes,
    seat_units,
    timing_footprint_bytes,
    timing_reserve_bytes,
)

H100_BYTES = 80 * GiB


def test_a_grades_footprint_is_its_processes_contexts_and_cases_tensors() -> None:
    fused_layers = [256 * MiB, 512 * MiB, 32 * MiB, 192 * MiB]  # the four cases' declared bytes, roughly
    footprint = timing_footprint_bytes(fused_layers)
    assert footprint == int(TIMING_PROCESSES * (CUDA_CONTEXT_BYTES + HEADROOM * 992 * MiB))
    assert 10 * GiB < footprint < 14 * GiB
    undeclared = int(TIMING_PROCESSES * (CUDA_CONTEXT_BYTES + HEADROOM * UNDECLARED_CASE_BYTES))
    assert timing_footprint_bytes([None]) == undeclared


# fused_layers' four timed cases as their reference plans set them (row stats, LayerNorm 8192^2, LayerNorm 4096x1024,
# Linear+GELU 4096^3): one set's buffers, its inputs, and the sets each rotates through (at least two, enough to pass
# 128 MiB)
FUSED_LAYERS_PLANS = [TimedCaseBytes(256 * MiB, 256 * MiB, 2), TimedCaseBytes(512 * MiB, 256 * MiB, 2),
                      TimedCaseBytes(32 * MiB, 16 * MiB, 4), TimedCaseBytes(192 * MiB, 128 * MiB, 2)]
H100_USABLE = int(79.2 * GiB)  # what torch reports of an H100 80GB HBM3
H200_USABLE = int(139.8 * GiB)


def test_a_planned_footprint_counts_what_each_process_keeps_of_the_plans() -> None:
    """The timer keeps every case's sets with a sealed copy of their inputs and checked outputs (2 x sets x set), the
    reference as much; the grader every set's inputs and one case's eager outputs; a profiler one set of each, twice.
    The declared-bytes estimate (5 processes x 1.5 x every case's bytes, 1 GiB for the matmul that declares none) gave
    fused_layers 17.1 GiB, one seat on an H100 (session 13: every grade's checks and timing one at a time)."""
    kept = 2 * (2 * 2 * 256 + 2 * 2 * 512 + 2 * 4 * 32 + 2 * 2 * 192) * MiB
    grader = (2 * 256 + 2 * 256 + 4 * 16 + 2 * 128) * MiB + 2 * 512 * MiB
    profilers = 2 * 2 * (256 + 512 + 32 + 192) * MiB
    after = planned_footprint_bytes(FUSED_LAYERS_PLANS, profilers_beside=False)
    assert after == int(PLANNED_HEADROOM * max(kept + grader, profilers + grader)) + 3 * CUDA_CONTEXT_BYTES
    beside = planned_footprint_bytes(FUSED_LAYERS_PLANS, profilers_beside=True)
    assert beside == int(PLANNED_HEADROOM * (kept + grader + profilers)) + 5 * CUDA_CONTEXT_BYTES
    assert 12 * GiB < after < 15 * GiB < beside
    # a class batch (profilers after the timing, where needed): two seats on an H100, four on an H200
    assert SEAT_UNITS // seat_units(H100_USABLE, after) == 2
    assert SEAT_UNITS // seat_units(H200_USABLE, after) == 4
    assert SEAT_UNITS // seat_units(H100_USABLE, beside) == 1  # every case profiled beside the checks
    # more sets, more kept: a plan's bytes count once per set it rotates through
    two, four = TimedCaseBytes(512 * MiB, 256 * MiB, 2), TimedCaseBytes(512 * MiB, 256 * MiB, 4)
    assert planned_footprint_bytes([four], False) > planned_footprint_bytes([two], False)
    assert planned_footprint_bytes([], False) == 3 * CUDA_CONTEXT_BYTES


def test_a_timing_host_gets_half_its_grades_footprint_not_the_correctness_share() -> None:
    """The timer holds every case's input sets and checked outputs at once: on an H100 in a class of 16 the
    correctness share left it 1.58 GiB of torch memory and fused_layers' perf-layernorm ran out at 2.10 GiB in use plus
    256 MiB asked (session 13). Half the grade's footprint is within what its seat reserves and above that need."""
    footprint = timing_footprint_bytes([256 * MiB, 512 * MiB, 32 * MiB, 192 * MiB])
    assert host_budget_bytes(footprint) == footprint // 2
    assert host_budget_bytes(footprint) > CUDA_CONTEXT_BYTES + 2 * GiB + 352 * MiB  # the context, 2.10 GiB + 256 MiB
    assert host_budget_bytes(footprint) * 2 <= footprint


def test_seats_are_what_the_timing_share_holds_at_least_one() -> None:
    footprint = 13 * GiB
    assert timing_reserve_bytes(H100_BYTES) == int(0.4 * H100_BYTES)
    assert SEAT_UNITS // seat_units(H100_BYTES, footprint) == 2  # 32 GiB holds two
    assert SEAT_UNITS // seat_units(141 * GiB, footprint) == 4
    assert seat_units(H100_BYTES, 200 * GiB) == SEAT_UNITS  # a huge course still times, one at a time
    assert seat_units(H100_BYTES, 64 * MiB) == 1  # the batch's workers bound how many grades time at once
    with pytest.raises(ValueError):
        seat_units(H100_BYTES, 0)
    with pytest.raises(ValueError):
        TimingSeats("gpu", 0)
    with pytest.raises(ValueError):
        TimingSeats("gpu", SEAT_UNITS + 1)


def test_a_grade_holds_the_parts_of_the_reserve_its_footprint_needs() -> None:
    """The reserve in SEAT_UNITS equal parts (0.5 GiB on an H100): fused_layers' 13.6 GiB takes 28 of 64, so two
    at once, as two seats did; a grade with one small case takes one part, and fits beside them."""
    part = timing_reserve_bytes(H100_USABLE) // SEAT_UNITS
    assert seat_units(H100_USABLE, 13 * GiB + 600 * MiB) == -(-(13 * GiB + 600 * MiB) // part)
    assert 2 * seat_units(H100_USABLE, 13 * GiB + 600 * MiB) <= SEAT_UNITS < 3 * seat_units(H100_USABLE, 13 * GiB)
    assert seat_units(H100_USABLE, 1) == seat_units(H100_USABLE, part) == 1
    assert seat_units(H100_USABLE, part + 1) == 2
    assert seat_units(H100_USABLE, 500 * GiB) == SEAT_UNITS  # past the reserve: it times alone
    with pytest.raises(ValueError):
        seat_units(H100_USABLE, 0)


def test_grades_of_unequal_footprints_never_hold_more_than_the_reserve(tmp_path: Path) -> None:
    """Four parts: a grade needing three and one needing one fill them; the next needing two waits, first in line,
    and a grade needing one that comes after it waits behind it (it is not passed) until two parts are free."""
    big, small, middle = (TimingSeats("gpu", n, tmp_path, total=4) for n in (3, 1, 2))
    order: list[str] = []
    with big.held() as first, small.held() as second:
        assert (first, second) == (0, 3)
        waiting = threading.Thread(target=_hold_and_note, args=(middle, "middle", order))
        waiting.start()
        time.sleep(0.3)
        behind = threading.Thread(target=_hold_and_note, args=(small, "small", order))
        behind.start()
        time.sleep(0.3)
        assert order == [] and waiting.is_alive() and behind.is_alive()
    waiting.join(timeout=5)
    behind.join(timeout=5)
    assert order == ["middle 0", "small 2"]  # in line's order; the small one beside the middle one's two parts


def _hold_and_note(seats: TimingSeats, who: str, order: list[str]) -> None:
    with seats.held() as seat:
        order.append(f"{who} {seat}")
        time.sleep(0.2)


def test_a_third_grade_waits_for_one_of_two_seats(tmp_path: Path) -> None:
    seats = TimingSeats("GPU-abc/1", 1, tmp_path, total=2)
    assert all(path.parent == tmp_path and "/" not in path.name for path in seats.paths)
    taken: list[int] = []
    with seats.held() as first, seats.held() as second:
        assert {first, second} == {0, 1}
        third = threading.Thread(target=lambda: taken.append(_hold_once(seats)))
        third.start()
        time.sleep(0.3)
        assert taken == [] and third.is_alive()  # both seats held: it waits
    third.join(timeout=5)
    assert taken == [0]  # the lowest free seat


def _hold_once(seats: TimingSeats) -> int:
    with seats.held() as seat:
        return seat


def test_a_seat_comes_back_when_its_holder_dies(tmp_path: Path) -> None:
    """The seat is the grade process's flock: killed mid-phase, it holds nothing (no lease to expire)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from grader.running.processes.gpu_seats import TimingSeats; "
         f"seats = TimingSeats('gpu', 1, Path({str(tmp_path)!r}), total=1); "
         "held = seats.held(); held.__enter__(); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[3])
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        seats = TimingSeats("gpu", 1, tmp_path, total=1)
        taken: list[int] = []
        waiter = threading.Thread(target=lambda: taken.append(_hold_once(seats)))
        waiter.start()
        time.sleep(0.3)
        assert taken == []  # the other process holds the only seat
        holder.kill()
        waiter.join(timeout=5)
        assert taken == [0]
    finally:
        holder.kill()
        holder.wait()

