"""A deadline charges a worker its own time, not the machine's load: the seconds its main thread waited on a run
queue (ready to run, no CPU free: other grades, other students) are added back to its deadline, up to
`MAX_STRETCH` times the deadline. A worker that spins or sleeps past its deadline on an idle machine is stopped
when it always was; the same worker on a machine 16 grades share gets the CPU time it would have had alone.

Linux's schedstat (/proc/PID/task/PID/schedstat: time on a CPU, time waiting on a run queue, in ns) says how long;
where it cannot be read (another OS, a process gone), nothing is added back."""

from __future__ import annotations

import time

# A deadline stretches to at most this many times itself: a submission that keeps the machine busy with threads of
# its own cannot hold its grade open for long (batch.run.default_grade_timeout allows for it).
MAX_STRETCH = 3.0
SAID_FROM_S = 0.5  # waits shorter than this go unmentioned in a timeout's words


def run_queue_wait_s(pid: int | None) -> float | None:
    """Seconds the main thread of process `pid` has waited, ready to run, for a CPU since it started; None where
    that cannot be read."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/task/{pid}/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class LoadAllowance:
    """The run-queue wait of one worker since a request began (the seconds its deadline is owed)."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.base = run_queue_wait_s(pid)
        self.started = time.monotonic()

    def waited_s(self) -> float:
        """Seconds waited for a CPU since the request began (0 where schedstat is not readable)."""
        if self.base is None:
            return 0.0
        now = run_queue_wait_s(self.pid)
        return max(0.0, now - self.base) if now is not None else 0.0


def stretched(limit: float, waited_s: float, started: float, allowed_s: float) -> float:
    """A deadline at monotonic time `limit`, of a request that began at `started` with `allowed_s` seconds, moved by
    the seconds its worker waited for a CPU, and never past MAX_STRETCH times what it allowed."""
    return min(limit + max(0.0, waited_s), started + MAX_STRETCH * allowed_s)
