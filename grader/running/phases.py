"""Where a grade's time goes: wall seconds per phase (start-up, correctness, replay, timing, compile; on a GPU
also the reruns of faulted cases under compute-sanitizer and on the CPU).

Phases nest (a worker start-up inside a correctness case); each second counts once, in the innermost
phase open at the time. Compile seconds are reported by the workers (Triton's JIT compiles happen
inside kernel launches) and recorded as their own phase, informational only.

Where $GRADER_PHASE_TRACE names a file, every phase also appends one JSON line there when it ends (pid, phase,
start and end on the monotonic clock, which every process of the machine shares): benchmarks/grading_time.py
--profile lays the process tree's CPU seconds and the GPU's busy share over those intervals.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

PHASES = ("start-up", "compile", "correctness", "replay", "sanitizer", "cpu-rerun", "timing")
TRACE_VARIABLE = "GRADER_PHASE_TRACE"


class PhaseClock:
    def __init__(self, trace: str | None = None) -> None:
        self.seconds: dict[str, float] = {}
        self._open: list[list[float]] = []  # per open phase: [started, seconds spent in nested phases]
        self._trace = trace if trace is not None else os.environ.get(TRACE_VARIABLE, "")

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        self._open.append([started, 0.0])
        try:
            yield
        finally:
            _, nested = self._open.pop()
            ended = time.monotonic()
            spent = ended - started
            self.add(name, spent - nested)
            if self._open:
                self._open[-1][1] += spent
            if self._trace:
                self._append_trace(name, started, ended)

    def _append_trace(self, name: str, started: float, ended: float) -> None:
        if not append_trace(self._trace, name, started, ended):
            self._trace = ""  # a trace that cannot be written is dropped, never the grade

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = round(self.seconds.get(name, 0.0) + max(seconds, 0.0), 4)


@contextmanager
def traced(name: str) -> Iterator[None]:
    """A span of the grader's own work outside the grade's phases (its imports, judging, writing the reports,
    stopping the workers), written to $GRADER_PHASE_TRACE only: it never counts in a grade's `phases`."""
    trace = os.environ.get(TRACE_VARIABLE, "")
    started = time.monotonic()
    try:
        yield
    finally:
        if trace:
            append_trace(trace, name, started, time.monotonic())


def append_trace(trace: str, name: str, started: float, ended: float) -> bool:
    """One JSON line for a span (False when the trace cannot be written)."""
    line = json.dumps({"pid": os.getpid(), "phase": name, "start": started, "end": ended}) + "\n"
    try:  # one short O_APPEND write: the lines of concurrent grades never interleave
        fd = os.open(trace, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        return False
    return True
