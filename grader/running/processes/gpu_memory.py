"""A GPU memory budget per worker, held from the grader's side: a worker over its budget is stopped.

Several grades share one GPU. Inside a worker, torch's per-process memory fraction is a first guard
(`first_guard_fraction`), but it is cooperative: student code can raise it again, or allocate around
torch's allocator (raw cudaMalloc through ctypes or cupy), take all free memory, and make its
neighbours fail with CUDA out-of-memory. The limit that holds lives outside the worker: NVML reports
every process's GPU memory under its host pid (also for a process inside `unshare --pid`), and
`MemoryWatchdog`, a thread in the grader, polls it, adds it up per watched worker (its process group
and all its descendants) and SIGKILLs a worker that is over its budget.

What it cannot do: it polls, so between two reads a hog can still take the whole GPU, and a killed
process's memory comes back only when the driver has torn its context down (on the H200, NVML stops
listing an 8 GiB hog 110-130 ms after SIGKILL). The watchdog makes such an episode short and names the
culprit; a neighbour that ran out of memory during it must be retried by its caller. Also:
- it watches one GPU (CUDA_VISIBLE_DEVICES's first): workers must see only that one;
- NVML's pids are the host's, so the grader must run in the host's PID namespace (in a container with
  a PID namespace of its own, NVML's pids do not name its processes);
- a worker's process counts only while it is in the worker's group or below the worker: one that
  double-forks out of the tree (re-parented to the grader, a subreaper, or to init) is lost. Inside the
  worker's own PID namespace (the grader as root) orphans are re-parented to the worker, so none is.

    reader = nvml_reader()                      # None without pynvml or a driver (reason logged)
    with MemoryWatchdog(reader) as watchdog:
        budget = worker_budget_bytes(reader.total_bytes(), concurrent_grades=4)
        watch = watchdog.watch(worker.pid, budget, label="alice/fused_layers.py")
        ...                                     # the worker dies: watch.exceeded says why
        watchdog.unwatch(watch)
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType

from grader.running.processes.nvml import GpuMemoryReader

logger = logging.getLogger(__name__)

GiB = 1 << 30
MiB = 1 << 20
DEFAULT_INTERVAL_S = 0.05

# The reserve kept out of the workers' shares: what is on the GPU but in no worker's budget, namely the
# grader's own torch work (its CUDA context and the tensors it compares) and memory the driver holds
# that NVML attributes to no process. 6% of the GPU (8.4 GiB of an H200's 140 GiB, against 256 MiB for
# one 8192x8192 fp32 tensor of fused_layers' largest case) grows with the card, as the cases a course
# writes for it do; a flat 8 GiB would eat half of a 16 GiB card, so small cards keep 2 GiB instead.
RESERVE_FRACTION = 0.06
MIN_RESERVE_BYTES = 2 * GiB
# No worker gets less: a CUDA worker holds its context (CUDA_CONTEXT_BYTES, below) before its first
# tensor, so a budget near that would stop every worker as it starts.
MIN_WORKER_BUDGET_BYTES = 2 * GiB
# What NVML counts for a worker beyond torch's allocator: the CUDA context and the kernels loaded into
# it. torch's memory fraction limits only the allocator, so the first guard leaves this out. An estimate
# (typical of torch on recent GPUs with lazy module loading), not yet measured on our H200: the
# `context` lines of benchmarks/gpu_memory_probe.py measure it.
CUDA_CONTEXT_BYTES = 768 * MiB

_MAX_ANCESTRY = 64  # parent links followed from a process towards a watched worker


# ---------------------------------------------------------------------------------------------- budget policy


def names_own_budget(text: str) -> bool:
    """Pure: do these words (a failure's, a case's) speak of a worker's own budget, as the watchdog's do when it stops
    one (`Watch.message`)? Such an out-of-memory is the submission's and final; any other may be a neighbour's."""
    return "budget" in text


def default_reserve_bytes(total_bytes: int) -> int:
    """The part of a GPU kept out of the workers' shares (see RESERVE_FRACTION)."""
    return max(MIN_RESERVE_BYTES, int(total_bytes * RESERVE_FRACTION))


def worker_budget_bytes(total_bytes: int, concurrent_grades: int, spec_budget_bytes: int | None = None,
                        reserve_bytes: int | None = None, *, workers_per_grade: int = 1,
                        floor_bytes: int = MIN_WORKER_BUDGET_BYTES) -> int:
    """One worker's GPU memory budget: the assignment's own budget if it names one, at most an even
    share of the GPU less the reserve, and never less than `floor_bytes`.

    `workers_per_grade`: the GPU workers one grade runs at the same time (a Battery's worker and the
    replayer it prestarts: 2). Where the floor is above the share, the budgets add up to more than the
    GPU: run fewer grades at once, at most (total - reserve) // (floor * workers_per_grade)."""
    if concurrent_grades < 1 or workers_per_grade < 1:
        raise ValueError(f"concurrent_grades ({concurrent_grades}) and workers_per_grade ({workers_per_grade}) "
                         "must be at least 1")
    reserve = default_reserve_bytes(total_bytes) if reserve_bytes is None else reserve_bytes
    share = (total_bytes - reserve) // (concurrent_grades * workers_per_grade)
    budget = share if spec_budget_bytes is None else min(spec_budget_bytes, share)
    return max(budget, floor_bytes)


def first_guard_fraction(budget_bytes: int, total_bytes: int, context_bytes: int = CUDA_CONTEXT_BYTES) -> float:
    """The worker's `torch.cuda.set_per_process_memory_fraction(...)` for a budget.

    A first, cooperative guard only: it makes an honest oversized allocation fail inside the worker as
    a clean torch.OutOfMemoryError (reported as the student's error) before the watchdog has to kill the
    worker. A student can call set_per_process_memory_fraction(1.0) again or allocate outside torch's
    allocator; the watchdog is the real limit. The fraction covers torch's allocator only, so the CUDA
    context (`context_bytes`, which NVML counts) is left out, and the guard trips first."""
    if total_bytes <= 0:
        raise ValueError(f"total_bytes must be positive, not {total_bytes}")
    return min(1.0, max(0.0, (budget_bytes - context_bytes) / total_bytes))


def format_bytes(count: int) -> str:
    """`12.4 GiB`, `8 GiB`, `512 MiB`: one decimal at most, none when it is zero."""
    unit, name = (GiB, "GiB") if abs(count) >= GiB else (MiB, "MiB")
    text = f"{count / unit:.1f}"
    return f"{text.removesuffix('.0')} {name}"


# ---------------------------------------------------------------------------------------------- processes


@dataclass(frozen=True)
class _Stat:
    """What /proc/<pid>/stat says about a process that the watchdog needs."""

    pid: int
    ppid: int
    pgid: int
    start: int  # clock ticks after boot: with the pid, names one process (pids are reused, this pair is not)


def _read_stat(pid: int) -> _Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    # "pid (comm) state ppid pgrp session tty tpgid flags ... starttime ...": comm may hold spaces and ")"
    fields = text[text.rfind(")") + 2:].split()
    try:
        return _Stat(pid, int(fields[1]), int(fields[2]), int(fields[19]))
    except (IndexError, ValueError):
        return None


def _all_processes() -> list[_Stat]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = _read_stat(int(entry.name))
            if stat is not None:
                found.append(stat)
    return found


def _kill_exactly(stat: _Stat) -> bool:
    """SIGKILL this process, and no other that took its pid since it was seen (a pidfd pins it)."""
    if stat.pid in (0, 1, os.getpid()):
        return False
    try:
        fd = os.pidfd_open(stat.pid)
    except ProcessLookupError:
        return False
    except (AttributeError, OSError):  # no pidfd (an old kernel): a plain kill, after checking once more
        now = _read_stat(stat.pid)
        if now is None or now.start != stat.start:
            return False
        try:
            os.kill(stat.pid, signal.SIGKILL)
            return True
        except OSError:
            return False
    try:
        now = _read_stat(stat.pid)
        if now is None or now.start != stat.start:
            return False
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------- the watchdog


class Watch:
    """One watched worker: its budget, and what the watchdog saw. The caller keeps it per worker.

    Thread-safe to read. `exceeded` turns True (and `message` gets its text) when the watchdog stopped
    the worker for going over its budget; `peak_bytes` is the most GPU memory the watchdog saw the
    worker hold (its whole group and descendants), over budget or not."""

    def __init__(self, pid: int, budget_bytes: int, label: str, group: int | None, start: int) -> None:
        self.pid = pid
        self.budget_bytes = budget_bytes
        self.label = label
        self._group = group  # the pid's own process group, or None if it does not lead one
        self._start = start
        self._lock = threading.Lock()
        self._exceeded = False
        self._peak = 0
        self._used = 0
        self._message: str | None = None
        self._killed: tuple[int, ...] = ()

    @property
    def exceeded(self) -> bool:
        with self._lock:
            return self._exceeded

    @property
    def peak_bytes(self) -> int:
        with self._lock:
            return self._peak

    @property
    def used_bytes(self) -> int:
        """What the latest poll saw."""
        with self._lock:
            return self._used

    @property
    def message(self) -> str | None:
        """`used 12.4 GiB of GPU memory, over its budget of 8 GiB: stopped`, once exceeded."""
        with self._lock:
            return self._message

    @property
    def killed_pids(self) -> tuple[int, ...]:
        """The processes SIGKILLed when the budget was first exceeded (its group was signalled too)."""
        with self._lock:
            return self._killed

    def _saw(self, used: int) -> None:
        with self._lock:
            self._used = used
            self._peak = max(self._peak, used)

    def _stopped(self, used: int, killed: Iterable[int]) -> bool:
        """Record the stop; True the first time."""
        with self._lock:
            first = not self._exceeded
            if first:
                self._exceeded = True
                self._killed = tuple(sorted(killed))
                self._message = (f"used {format_bytes(used)} of GPU memory, over its budget of "
                                 f"{format_bytes(self.budget_bytes)}: stopped")
            return first

    def __repr__(self) -> str:
        return f"Watch(pid={self.pid}, budget={format_bytes(self.budget_bytes)}, label={self.label!r})"


class MemoryWatchdog:
    """A daemon thread that keeps watched workers within their GPU memory budgets.

    Every `interval_s` it reads the reader once (not at all while nothing is watched), adds up the
    usage of each watched worker's process group and descendants, and SIGKILLs a worker over its
    budget: its process group (only a group the worker leads) and each of its processes found in
    /proc. It signals nothing else: not a process it was not asked to watch, not a pid reused since
    (a watch whose process is gone from /proc is dropped), not the grader. Errors in the thread
    (a reader that raises, a GPU that fell off the bus) are logged and the next poll tries again."""

    def __init__(self, reader: GpuMemoryReader, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, not {interval_s}")
        self.reader = reader
        self.interval_s = interval_s
        self._lock = threading.Lock()  # the watches; held from a kill's decision to its signals
        self._watches: dict[int, Watch] = {}
        self._closing = threading.Event()
        self._last_error: str | None = None
        self._thread = threading.Thread(target=self._run, name="gpu-memory-watchdog", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the caller's side

    def watch(self, pid: int, budget_bytes: int, label: str) -> Watch:
        """Watch the worker `pid` (which leads its own process group): from the next poll on, it and
        every process of its group and below it count against `budget_bytes`. (A pid that leads no
        group counts with its descendants only, and no group is ever signalled for it.)"""
        if self._closing.is_set():
            raise RuntimeError("the GPU memory watchdog is closed")
        if budget_bytes <= 0:
            raise ValueError(f"budget_bytes must be positive, not {budget_bytes}")
        stat = _read_stat(pid)
        if stat is None:
            raise ProcessLookupError(f"no process {pid} to watch ({label})")
        if pid == os.getpid():
            raise ValueError("the watchdog does not watch the grader itself")
        watch = Watch(pid, budget_bytes, label, group=pid if stat.pgid == pid else None, start=stat.start)
        with self._lock:
            if pid in self._watches:
                raise ValueError(f"process {pid} is watched already ({self._watches[pid].label})")
            self._watches[pid] = watch
        return watch

    def unwatch(self, watch: Watch) -> None:
        """Stop watching; once this returns, the watchdog sends this worker no signal. Idempotent."""
        with self._lock:
            if self._watches.get(watch.pid) is watch:
                del self._watches[watch.pid]

    def close(self) -> None:
        self._closing.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=max(5.0, 10 * self.interval_s))

    def __enter__(self) -> MemoryWatchdog:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def last_error(self) -> str | None:
        """The error of the latest poll that failed, until a poll succeeds again."""
        return self._last_error

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        next_poll = time.monotonic() + self.interval_s
        while not self._closing.wait(max(0.0, next_poll - time.monotonic())):
            next_poll = max(next_poll + self.interval_s, time.monotonic())
            try:
                self._poll()
            except Exception as exc:  # the thread must outlive any one poll
                self._failed("polling", exc)
            else:
                if self._last_error is not None:
                    logger.info("GPU memory watchdog: polls work again")
                    self._last_error = None

    def _failed(self, what: str, exc: Exception) -> None:
        text = f"{what}: {type(exc).__name__}: {exc}"
        if text != self._last_error:  # once per distinct error, not 20 times a second
            logger.warning("GPU memory watchdog: %s (it keeps polling)", text, exc_info=exc)
        self._last_error = text

    def _poll(self) -> None:
        with self._lock:
            watches = list(self._watches.values())
        if not watches:
            return
        usage = self.reader.used_by_pid()
        stats = _StatCache()
        live = self._live(watches, stats)
        totals: dict[Watch, int] = {w: 0 for w in live.values()}
        holders: dict[Watch, set[int]] = {w: set() for w in live.values()}
        groups = {w._group: w for w in live.values() if w._group is not None}
        for pid, used in usage.items():
            owner = _owner(pid, live, groups, stats) if used > 0 else None
            if owner is not None:
                totals[owner] += used
                holders[owner].add(pid)
        for watch, used in totals.items():
            watch._saw(used)
            if used > watch.budget_bytes:
                self._stop(watch, used, holders[watch])

    def _live(self, watches: list[Watch], stats: _StatCache) -> dict[int, Watch]:
        """The watches whose worker is still the process watched (alive or a zombie); the others are
        dropped: their pid may be anyone's now."""
        live = {}
        for watch in watches:
            stat = stats.get(watch.pid)
            if stat is not None and stat.start == watch._start:
                live[watch.pid] = watch
            else:
                with self._lock:
                    if self._watches.get(watch.pid) is watch:
                        del self._watches[watch.pid]
        return live

    def _stop(self, watch: Watch, used: int, holders: set[int]) -> None:
        with self._lock:
            if self._watches.get(watch.pid) is not watch:
                return  # unwatched meanwhile: not ours to stop any more
            leader = _read_stat(watch.pid)
            if leader is None or leader.start != watch._start:
                return
            group = watch._group
            members = _members(watch.pid, group, holders)
            if group is not None and group != os.getpgrp():
                try:
                    os.killpg(group, signal.SIGKILL)
                except OSError:
                    pass  # the group may be gone already; its members are signalled one by one below
            killed = [m.pid for m in members if _kill_exactly(m)]
        if watch._stopped(used, killed):
            logger.warning("GPU memory watchdog: %s (pid %d) %s; killed %s", watch.label, watch.pid, watch.message,
                           f"process group {group} and pids {sorted(killed)}" if group is not None
                           else f"pids {sorted(killed)}")


class _StatCache:
    """/proc/<pid>/stat, read at most once per poll."""

    def __init__(self) -> None:
        self._seen: dict[int, _Stat | None] = {}

    def get(self, pid: int) -> _Stat | None:
        if pid not in self._seen:
            self._seen[pid] = _read_stat(pid)
        return self._seen[pid]


def _owner(pid: int, live: Mapping[int, Watch], groups: Mapping[int, Watch],
           stats: _StatCache) -> Watch | None:
    """The watch a process counts for: the first process on its way up the parent links that is a
    watched worker or in a watched worker's group. None for everything else, the grader included."""
    me = os.getpid()
    current = pid
    for _ in range(_MAX_ANCESTRY):
        if current <= 1 or current == me:
            return None
        stat = stats.get(current)
        if stat is None:
            return None  # exited, or not in our PID namespace
        if current in live:
            return live[current]
        if stat.pgid in groups:
            return groups[stat.pgid]
        current = stat.ppid
    return None


def _members(pid: int, group: int | None, holders: Iterable[int]) -> list[_Stat]:
    """Every process of the worker now: its group, and the descendants of the worker and of each
    group member (a child that called setsid is still one), plus the GPU holders the poll found."""
    processes = _all_processes()
    by_pid = {p.pid: p for p in processes}
    children: dict[int, list[_Stat]] = {}
    for process in processes:
        children.setdefault(process.ppid, []).append(process)
    found: dict[int, _Stat] = {}
    todo = [by_pid[pid]] if pid in by_pid else []
    todo += [p for p in processes if group is not None and p.pgid == group]
    todo += [by_pid[h] for h in holders if h in by_pid]
    while todo:
        process = todo.pop()
        if process.pid in found or process.pid == os.getpid():
            continue
        found[process.pid] = process
        todo.extend(children.get(process.pid, ()))
    return list(found.values())
