"""Where a grade's time goes: wall seconds per phase (start-up, correctness, replay, timing, compile; on a GPU
also the reruns of faulted cases under compute-sanitizer and on the CPU).

Phases nest (a worker start-up inside a correctness case); each second counts once, in the innermost
phase open at the time. Compile seconds are reported by the workers (Triton's JIT compiles happen
inside kernel launches) and recorded as their own phase, informational only.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

PHASES = ("start-up", "compile", "correctness", "replay", "sanitizer", "cpu-rerun", "timing")


class PhaseClock:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._open: list[list[float]] = []  # per open phase: [started, seconds spent in nested phases]

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        self._open.append([started, 0.0])
        try:
            yield
        finally:
            _, nested = self._open.pop()
            spent = time.monotonic() - started
            self.add(name, spent - nested)
            if self._open:
                self._open[-1][1] += spent

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = round(self.seconds.get(name, 0.0) + max(seconds, 0.0), 4)
