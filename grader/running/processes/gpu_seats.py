"""Seats for the timing phase's GPU memory: how many grades at once may hold their timed cases' tensors.

A grade's timing phase holds every timed case's inputs and outputs in several processes at once (the timer, the
reference's worker, the two profiled replays, the grader's own torch for eager timing) from the checks at the
timed size until its last measurement, and most of that time it waits for the GPU's exclusive slot. Without a
limit, every grade of a batch waits there with its tensors: six honest copies of fused_layers on one H100 80GB
took all its memory, and two of them lost performance cases to CUDA out-of-memory (docs/gpu-runs-2026-12-06.txt,
the `identical` step). A seat is one of `count` lock files (fcntl.flock) beside the GPU slot's, taken by the
grade's own process (the grader's, never a worker's) for its whole timing phase; the kernel lets it go when that
process ends, however it ends. TIMING_FRACTION of the GPU's memory is cut into SEAT_UNITS equal parts and a grade
holds as many as its footprint needs, computed from the cases' recorded plans (`planned_footprint_bytes`: the
buffers each process keeps; SEAT_UNITS // `seat_units`: how many grades of one footprint fit at once);
`timing_footprint_bytes`, from the bytes the spec declares, sizes the timer's budget before anything is recorded.
The workers' budgets (gpu_memory) are caps the watchdog holds, not reservations, and are not cut by it: the timer
is a worker of the student's sandbox and holds every timed case at once (cut by the timing share, six grades'
budgets left it 2.8 GiB on an H100: too little for fused_layers).

    seats = TimingSeats(gpu_name(), seat_units(total, footprint))
    with seats.held():
        ...  # check, keep, time and profile every case
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from grader.running.processes.gpu_memory import CUDA_CONTEXT_BYTES, GiB
from grader.running.processes.gpu_slot import lock_dir

# The part of a GPU grades' timing phases may hold at once: on an H100 80GB, 32 GiB, two fused_layers timing
# phases at once (13 GiB each), four on an H200. Six copies of fused_layers graded at once on an H100 peaked at
# 23.9 GB of the card's 80 with two seats (docs/gpu-runs-2026-12-06.txt).
TIMING_FRACTION = 0.4
# Processes that hold a timing phase's tensors at once: the timer, the reference's worker, the two profiled
# replays (the student's, the reference's) and the grader's own torch (eager timing, the checks' copies).
TIMING_PROCESSES = 5
# Each process holds a case's tensors and what timing them fresh needs beside them (poison, saved inputs), and
# torch's caching allocator rounds up: 1.5x the bytes the case declares it moves.
HEADROOM = 1.5
UNDECLARED_CASE_BYTES = 1 * GiB  # a case whose problem declares no bytes_moved
SEAT_POLL_S = 0.05
SEAT_UNITS = 64  # the timing reserve's equal parts (an H100's: 0.5 GiB each); a grade holds what its footprint needs


def timing_footprint_bytes(case_bytes: Iterable[int | None]) -> int:
    """Pure: one grade's timing phase's GPU memory, given the bytes each timed case moves (None: undeclared)."""
    tensors = sum(UNDECLARED_CASE_BYTES if moved is None else moved for moved in case_bytes)
    return int(TIMING_PROCESSES * (CUDA_CONTEXT_BYTES + HEADROOM * tensors))


@dataclass(frozen=True)
class TimedCaseBytes:
    """One recorded case's GPU memory as its plan sets it (timing.launch_plan): every buffer of one input set (inputs,
    outputs, scratch), the inputs' part of that, and how many input sets its timed run rotates through."""

    set_bytes: int
    input_bytes: int
    sets: int


# The caching allocator's rounding (2 MiB blocks, 20 MiB segments) and the memory watch's tables over the bytes a
# plan names.
PLANNED_HEADROOM = 1.1


def planned_footprint_bytes(cases: Sequence[TimedCaseBytes], profilers_beside: bool) -> int:
    """Pure: one grade's timing phase's GPU memory, from its recorded plans. The timer keeps every case's input sets at
    once, each beside a sealed copy of its inputs and of its checked outputs (planned_launches.PlannedRun): twice the
    set's bytes per set; the reference's worker keeps as much for its own launches. The grader's process holds every
    set's inputs (drawn on the GPU) and one case's eager outputs and temporaries at a time (twice a set). Each profiled
    replay keeps one set of every case, twice over. Profilers started beside the checks (`profilers_beside`: every case
    profiled) hold theirs with the timer's; otherwise they start after the timer and the reference let go. Every
    process has a CUDA context."""
    kept = sum(2 * case.sets * case.set_bytes for case in cases)
    eager = max((2 * case.set_bytes for case in cases), default=0)
    grader = sum(case.sets * case.input_bytes for case in cases) + eager
    profiler = sum(2 * case.set_bytes for case in cases)
    contestants = 2 * kept + grader
    profiled = 2 * profiler + grader
    if profilers_beside:
        return int(PLANNED_HEADROOM * (contestants + 2 * profiler)) + 5 * CUDA_CONTEXT_BYTES
    return int(PLANNED_HEADROOM * max(contestants, profiled)) + 3 * CUDA_CONTEXT_BYTES


def host_budget_bytes(footprint_bytes: int) -> int:
    """Pure: the GPU memory budget of a kernel host that holds a grade's timed cases (the timer, the student's profiled
    replay), given that grade's timing footprint: half of it. The timer holds every case's input sets and checked
    outputs at once, the reference's worker about as much, the profilers one set each; the grader's plan decides what a
    host allocates, and a seat reserves the whole footprint. (The correctness share, (80 GB less 6%) / 32 in a class of
    16, left the timer 1.58 GiB of torch memory for fused_layers' four cases on an H100: one case lost, session 13.)"""
    return footprint_bytes // 2


def timing_reserve_bytes(total_bytes: int) -> int:
    """Pure: the part of a GPU its grades' timing phases may hold at once."""
    return int(total_bytes * TIMING_FRACTION)


def seat_units(total_bytes: int, footprint_bytes: int) -> int:
    """Pure: how many of the timing reserve's SEAT_UNITS equal parts one grade's timing phase holds: its footprint,
    rounded up to whole parts; at least one, at most all (a footprint past the reserve times alone)."""
    if footprint_bytes <= 0:
        raise ValueError(f"a footprint must be positive, not {footprint_bytes}")
    part = max(1, timing_reserve_bytes(total_bytes) // SEAT_UNITS)
    return max(1, min(SEAT_UNITS, -(-footprint_bytes // part)))


class TimingSeats:
    """The GPU's timing reserve as `total` equal parts (SEAT_UNITS), each a lock file (fcntl.flock) in the GPU slot's
    folder (hidden from sandboxes), one set per GPU; a grade holds as many as its footprint needs (`seat_units`). A
    count of equal seats let grades of unequal footprints take more than the reserve (a grade with two cases to time
    took a third of four seats beside two grades with four cases: session 15's class held five at once)."""

    def __init__(self, name: str, units: int, folder: Path | None = None, total: int = SEAT_UNITS) -> None:
        if not 1 <= units <= total:
            raise ValueError(f"a grade holds between 1 and {total} parts of the timing reserve, not {units}")
        folder = folder or lock_dir()
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        self.units = units
        self.paths = tuple(folder / f"gpu-{safe}.seat-{n}" for n in range(total))
        self.line = folder / f"gpu-{safe}.seat-line"

    @contextmanager
    def held(self) -> Iterator[int]:
        """Wait for `units` free parts and hold them; yields the lowest one's number. The grade first in line holds the
        line (a lock of its own) while it gathers its parts and the others queue behind it, so a grade that needs many
        is not passed forever by grades that need few; the parts come back as their holders end, however they end."""
        fds = [os.open(path, os.O_RDWR | os.O_CREAT, 0o666) for path in self.paths]
        taken: list[int] = []
        try:
            line = os.open(self.line, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(line, fcntl.LOCK_EX)
                while len(taken) < self.units:
                    for n, fd in enumerate(fds):
                        if len(taken) == self.units:
                            break
                        if n in taken:
                            continue
                        try:
                            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        except BlockingIOError:
                            continue
                        taken.append(n)
                    if len(taken) < self.units:
                        time.sleep(SEAT_POLL_S)
            finally:
                fcntl.flock(line, fcntl.LOCK_UN)
                os.close(line)
            yield min(taken)
        finally:
            for n in taken:
                fcntl.flock(fds[n], fcntl.LOCK_UN)
            for fd in fds:
                os.close(fd)
