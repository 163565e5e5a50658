"""A deadline charges a worker its own time: the seconds its main thread waited on a run queue (ready to run, no CPU
free: other grades, other students) are added back to its deadline, up to `MAX_STRETCH` times the deadline. A worker
that spins or sleeps past its deadline on an idle machine is stopped when it always was; the same worker on a machine
16 grades share gets the CPU time it would have had alone. What the submission's own load ran meanwhile (the
worker's other threads, the processes carrying its sandbox's token that started since the request began) comes off
the allowance, so spinning threads of its own buy a submission no time.

Linux's schedstat (/proc/PID/task/PID/schedstat: time on a CPU, time waiting on a run queue, in ns) says how long;
where it cannot be read (another OS, a process gone), nothing is added back."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

# A deadline stretches to at most this many times itself: a submission that keeps the machine busy with processes
# it hid cannot hold its grade open for long (batch.run.default_grade_timeout allows for it).
MAX_STRETCH = 3.0
SAID_FROM_S = 0.5  # waits shorter than this go unmentioned in a timeout's words
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def _schedstat(pid: int) -> tuple[float, float] | None:
    """(seconds on a CPU, seconds waiting on a run queue) of process `pid`'s main thread since it started."""
    try:
        with open(f"/proc/{pid}/task/{pid}/schedstat", "rb") as f:
            fields = f.read().split()
        return int(fields[0]) / 1e9, int(fields[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _stat(pid: int) -> tuple[float, float] | None:
    """(CPU seconds of every thread of process `pid`, user and system; when it started, in seconds since boot), None
    where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[-1].split()  # fields[0] is stat(5)'s field 3 (the state)
        return (int(fields[11]) + int(fields[12])) * _TICK_S, int(fields[19]) * _TICK_S
    except (OSError, ValueError, IndexError):
        return None


def run_queue_wait_s(pid: int | None) -> float | None:
    """Seconds the main thread of process `pid` has waited, ready to run, for a CPU since it started; None where
    that cannot be read."""
    found = _schedstat(pid) if pid is not None else None
    return found[1] if found is not None else None


def _since_boot_s() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME) if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic()


@dataclass(frozen=True)
class Reading:
    """A worker at one moment: its main thread's run-queue wait, and the CPU seconds its other threads ran."""

    waited_s: float
    threads_s: float


class LoadAllowance:
    """What one worker's deadline is owed since a request began: its main thread's run-queue wait, less the CPU its
    own load took meanwhile (its other threads; the processes `own_processes()` names that started since). Reading
    the worker is two small files; the sandbox's processes are looked for only when a deadline has passed."""

    def __init__(self, pid: int | None, own_processes: Callable[[], list[int]] = list) -> None:
        self.pid = pid
        self.own_processes = own_processes
        self.started = _since_boot_s()
        self.base = self.reading()

    def reading(self) -> Reading | None:
        found = _schedstat(self.pid) if self.pid is not None else None
        whole = _stat(self.pid) if self.pid is not None else None
        if found is None or whole is None:
            return None
        return Reading(found[1], max(0.0, whole[0] - found[0]))

    def _newcomers_s(self) -> float:
        """CPU seconds of the sandbox's other processes that started since the request began."""
        total = 0.0
        for pid in self.own_processes():
            found = _stat(pid) if pid != self.pid else None
            if found is not None and found[1] >= self.started - _TICK_S:
                total += found[0]
        return total

    def owed_s(self, since: Reading | None = None) -> float:
        """Seconds the worker waited for a CPU others held, since `since` (default: the request's start); 0 where
        schedstat is not readable."""
        since = since or self.base
        now = self.reading() if since is not None else None
        if since is None or now is None:
            return 0.0
        own = (now.threads_s - since.threads_s) + self._newcomers_s()
        return max(0.0, (now.waited_s - since.waited_s) - own)


def stretched(limit: float, waited_s: float, started: float, allowed_s: float) -> float:
    """A deadline at monotonic time `limit`, of a request that began at `started` with `allowed_s` seconds, moved by
    the seconds its worker waited for a CPU, and never past MAX_STRETCH times what it allowed."""
    return min(limit + max(0.0, waited_s), started + MAX_STRETCH * allowed_s)
