"""The GPU memory watchdog (grader.running.processes.gpu_memory): real processes, fake GPU usage.

The watchdog's kills are tested on real process trees (a worker leading its own group, with a child in
the group or one that left it through setsid), against a fake reader whose usage the test sets; the
NVML reader's tests against a fake pynvml module are tests/running/processes/test_nvml.py. The last test, on a
CUDA machine with pynvml, has a child take GPU memory through torch and checks that NVML sees it and the
watchdog stops it.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from grader.running.processes.gpu_memory import (
    CUDA_CONTEXT_BYTES,
    GiB,
    MemoryWatchdog,
    MiB,
    default_reserve_bytes,
    first_guard_fraction,
    format_bytes,
    worker_budget_bytes,
)
from grader.running.processes.nvml import open_nvml_reader

INTERVAL_S = 0.05
# Kills must come within a few polls; generous, since this machine's two cores are shared.
KILL_DEADLINE_S = 3.0
H200_BYTES = 143771 * MiB  # what NVML reports as an H200's total


# ---------------------------------------------------------------------------------------------- helpers


class FakeReader:
    """GPU usage set by the test; raises while `failures_left` > 0."""

    def __init__(self, total: int = 80 * GiB) -> None:
        self.total = total
        self._usage: dict[int, int] = {}
        self._lock = threading.Lock()
        self.reads = 0
        self.failures_left = 0

    def set(self, usage: dict[int, int]) -> None:
        with self._lock:
            self._usage = dict(usage)

    def used_by_pid(self) -> dict[int, int]:
        with self._lock:
            self.reads += 1
            if self.failures_left > 0:
                self.failures_left -= 1
                raise RuntimeError("NVML fell off the bus")
            return dict(self._usage)

    def total_bytes(self) -> int:
        return self.total

    def wait_reads(self, count: int, timeout: float = 10.0) -> None:
        """Until `count` more polls have read it."""
        target = self.reads + count
        eventually(lambda: self.reads >= target, timeout)


def eventually(predicate: Callable[[], bool], timeout: float = KILL_DEADLINE_S) -> float:
    """Seconds until `predicate()` held; fails after `timeout`."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not true after {timeout} s")
        time.sleep(0.005)
    return time.monotonic() - started


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode()
    except OSError:
        return None
    return int(text[text.rfind(")") + 2:].split()[19])


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode()
    except OSError:
        return None
    return text[text.rfind(")") + 2]


@dataclass
class Family:
    """A worker-like process leading its own group, and its child."""

    leader: subprocess.Popen[str]
    child: int
    child_start: int
    leads_group: bool

    @property
    def pid(self) -> int:
        return self.leader.pid

    def alive(self) -> bool:
        return self.leader.poll() is None and _running(self.child, self.child_start)

    def dead(self) -> bool:
        return self.leader.poll() is not None and not _running(self.child, self.child_start)

    def end(self) -> None:
        if self.leader.poll() is None:
            (os.killpg if self.leads_group else os.kill)(self.leader.pid, signal.SIGKILL)
        self.leader.wait(timeout=10)
        if self.leader.stdout is not None:
            self.leader.stdout.close()
        if _running(self.child, self.child_start):
            os.kill(self.child, signal.SIGKILL)
        _reap(self.child)


def _running(pid: int, start: int) -> bool:
    """Still that process, and not a zombie (reaped here if it is our child, as a subreaper's would be)."""
    _reap(pid)
    return _start_time(pid) == start and _state(pid) not in (None, "Z", "X")


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


LEADER = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                         start_new_session=sys.argv[1] == "setsid")
print(child.pid, flush=True)
time.sleep(120)
"""


@pytest.fixture
def spawn() -> Iterator[Callable[..., Family]]:
    """`spawn()`: a process leading its own group with a child in it; `spawn("setsid")`: the child left it."""
    made: list[Family] = []

    def start(mode: str = "group", new_session: bool = True) -> Family:
        leader = subprocess.Popen([sys.executable, "-c", LEADER, mode], stdout=subprocess.PIPE, text=True,
                                  start_new_session=new_session)
        assert leader.stdout is not None
        child = int(leader.stdout.readline())
        start_time = _start_time(child)
        assert start_time is not None
        family = Family(leader, child, start_time, new_session)
        made.append(family)
        return family

    yield start
    for family in made:
        family.end()


@pytest.fixture
def reader() -> FakeReader:
    return FakeReader()


@pytest.fixture
def watchdog(reader: FakeReader) -> Iterator[MemoryWatchdog]:
    with MemoryWatchdog(reader, interval_s=INTERVAL_S) as dog:
        yield dog


@pytest.fixture
def keep_polling(spawn, watchdog) -> None:
    """An idle worker under watch, so the watchdog keeps reading after the test's own watch is gone
    (it reads nothing while nothing is watched)."""
    watchdog.watch(spawn().pid, 1 * GiB, "keeps the watchdog polling")


# ---------------------------------------------------------------------------------------------- the watchdog


def test_a_group_over_budget_is_killed_within_a_few_polls(spawn, reader, watchdog) -> None:
    family = spawn()
    reader.set({family.pid: 512 * MiB, family.child: 1 * GiB})
    watch = watchdog.watch(family.pid, 2 * GiB, "alice")
    reader.wait_reads(4)
    assert family.alive() and not watch.exceeded and watch.message is None
    assert watch.peak_bytes == watch.used_bytes == 1536 * MiB

    reader.set({family.pid: 512 * MiB, family.child: 3 * GiB})  # the child in the group grows
    seconds = eventually(lambda: watch.exceeded)
    eventually(family.dead)
    assert seconds < KILL_DEADLINE_S
    assert watch.message == "used 3.5 GiB of GPU memory, over its budget of 2 GiB: stopped"
    assert watch.peak_bytes == int(3.5 * GiB)
    assert {family.pid, family.child} <= set(watch.killed_pids)
    assert family.leader.wait(timeout=5) == -signal.SIGKILL


def test_a_descendant_that_left_the_group_counts_and_is_killed(spawn, reader, watchdog) -> None:
    family = spawn("setsid")
    assert os.getpgid(family.child) != family.pid  # precondition: out of the group, still below the worker
    watch = watchdog.watch(family.pid, 2 * GiB, "bob")
    reader.set({family.child: 3 * GiB})
    eventually(lambda: watch.exceeded)
    eventually(family.dead)
    assert watch.peak_bytes == 3 * GiB
    assert family.child in watch.killed_pids


def test_a_worker_at_its_budget_is_left_alone(spawn, reader, watchdog) -> None:
    family = spawn()
    watch = watchdog.watch(family.pid, 2 * GiB, "carol")
    reader.set({family.pid: 1 * GiB, family.child: 1 * GiB})  # exactly the budget: not over it
    reader.wait_reads(10)
    assert family.alive()
    assert not watch.exceeded and watch.message is None and watch.killed_pids == ()
    assert watch.peak_bytes == 2 * GiB


def test_peak_is_kept_when_usage_falls(spawn, reader, watchdog) -> None:
    family = spawn()
    watch = watchdog.watch(family.pid, 4 * GiB, "dave")
    reader.set({family.child: 3 * GiB})
    reader.wait_reads(3)
    reader.set({family.child: 1 * GiB})
    reader.wait_reads(3)
    assert watch.peak_bytes == 3 * GiB and watch.used_bytes == 1 * GiB and family.alive()


def test_unwatch_stops_watching(spawn, reader, watchdog, keep_polling) -> None:
    family = spawn()
    watch = watchdog.watch(family.pid, 1 * GiB, "erin")
    watchdog.unwatch(watch)
    watchdog.unwatch(watch)  # idempotent
    reader.set({family.pid: 10 * GiB})
    reader.wait_reads(10)
    assert family.alive() and not watch.exceeded


def test_nothing_is_read_while_nothing_is_watched(reader, watchdog) -> None:
    time.sleep(10 * INTERVAL_S)
    assert reader.reads == 0


def test_a_reader_that_raises_does_not_stop_the_thread(spawn, reader, watchdog, caplog) -> None:
    family = spawn()
    reader.failures_left = 5
    reader.set({family.child: 3 * GiB})
    with caplog.at_level(logging.WARNING, logger="grader.running.processes.gpu_memory"):
        watch = watchdog.watch(family.pid, 1 * GiB, "frank")
        eventually(lambda: watch.exceeded, timeout=KILL_DEADLINE_S + 5 * INTERVAL_S)
    eventually(family.dead)
    # the poll that stopped the worker clears the error once it returns: the worker may be dead a moment before that
    eventually(lambda: watchdog.last_error is None, timeout=5 * INTERVAL_S + 1.0)
    assert watchdog.alive
    assert reader.reads >= 6
    failures = [r for r in caplog.records if "fell off the bus" in r.getMessage()]
    assert len(failures) == 1, "one warning per distinct error, not one per poll"


def test_a_reader_returning_garbage_is_survived(spawn, watchdog, reader) -> None:
    family = spawn()
    reader.set({family.child: "lots"})  # type: ignore[dict-item]
    watch = watchdog.watch(family.pid, 1 * GiB, "gina")
    reader.wait_reads(3)
    assert watchdog.alive and "TypeError" in (watchdog.last_error or "")
    reader.set({family.child: 2 * GiB})
    eventually(lambda: watch.exceeded)


def test_only_watched_processes_are_ever_killed(spawn, reader, watchdog, keep_polling) -> None:
    watched, bystander = spawn(), spawn()
    # Huge usage everywhere except in the watched worker: the unwatched worker, the grader, init.
    reader.set({watched.pid: 1 * GiB, bystander.pid: 50 * GiB, bystander.child: 50 * GiB, os.getpid(): 50 * GiB,
                1: 50 * GiB})
    watch = watchdog.watch(watched.pid, 2 * GiB, "hank")
    reader.wait_reads(10)
    assert watched.alive() and bystander.alive() and not watch.exceeded
    assert watch.peak_bytes == 1 * GiB

    reader.set({watched.child: 3 * GiB, bystander.pid: 50 * GiB, os.getpid(): 50 * GiB})
    eventually(lambda: watch.exceeded)
    eventually(watched.dead)
    reader.wait_reads(5)
    assert bystander.alive()
    assert not {bystander.pid, bystander.child, os.getpid()} & set(watch.killed_pids)


def test_a_worker_that_does_not_lead_its_group_is_killed_alone(spawn, reader, watchdog, keep_polling) -> None:
    # Both in this test process's own group: killing the group would kill pytest.
    target, sibling = spawn(new_session=False), spawn(new_session=False)
    watch = watchdog.watch(target.pid, 1 * GiB, "ivan")
    reader.set({target.pid: 2 * GiB})
    eventually(lambda: watch.exceeded)
    eventually(target.dead)  # the worker and its child, one by one
    reader.wait_reads(3)
    assert sibling.alive()


def test_watch_refuses_what_it_cannot_watch(spawn, watchdog) -> None:
    with open("/proc/sys/kernel/pid_max") as f:
        no_such_pid = int(f.read()) + 1
    with pytest.raises(ProcessLookupError):
        watchdog.watch(no_such_pid, GiB, "nobody")
    with pytest.raises(ValueError, match="grader itself"):
        watchdog.watch(os.getpid(), GiB, "me")
    family = spawn()
    with pytest.raises(ValueError, match="positive"):
        watchdog.watch(family.pid, 0, "zero")
    watchdog.watch(family.pid, GiB, "first")
    with pytest.raises(ValueError, match="watched already"):
        watchdog.watch(family.pid, GiB, "second")


def test_a_watch_on_a_reaped_worker_kills_nothing(spawn, reader, watchdog, keep_polling) -> None:
    family = spawn()
    watch = watchdog.watch(family.pid, 1 * GiB, "judy")
    family.end()  # killed and reaped by its caller, which forgot to unwatch
    reader.set({family.pid: 5 * GiB})
    reader.wait_reads(5)
    assert not watch.exceeded and watchdog.alive


def test_close_stops_the_thread(reader) -> None:
    with MemoryWatchdog(reader, interval_s=INTERVAL_S) as dog:
        assert dog.alive
    assert not dog.alive
    with pytest.raises(RuntimeError, match="closed"):
        dog.watch(1, GiB, "late")
    with pytest.raises(ValueError):
        MemoryWatchdog(reader, interval_s=0)


# ---------------------------------------------------------------------------------------------- budget policy

# (total, concurrent grades, spec budget, reserve, workers per grade) -> budget; a comment says why
BUDGETS = [
    ((100 * GiB, 4, None, 4 * GiB, 1), 24 * GiB),  # (100 - 4) / 4
    ((100 * GiB, 4, 8 * GiB, 4 * GiB, 1), 8 * GiB),  # the spec asks for less than the share
    ((100 * GiB, 4, 64 * GiB, 4 * GiB, 1), 24 * GiB),  # the spec asks for more: the share wins
    ((100 * GiB, 4, None, 4 * GiB, 2), 12 * GiB),  # a worker and its replayer at once
    ((16 * GiB, 16, None, None, 1), 2 * GiB),  # the share (14/16 GiB) is under the floor
    ((100 * GiB, 1, 1 * GiB, 4 * GiB, 1), 2 * GiB),  # a spec under the floor: the CUDA context alone needs it
    ((2 * GiB, 1, None, None, 1), 2 * GiB),  # nothing left after the reserve: the floor
]


@pytest.mark.parametrize(("arguments", "expected"), BUDGETS)
def test_worker_budget(arguments, expected) -> None:
    total, grades, spec, reserve, per_grade = arguments
    assert worker_budget_bytes(total, grades, spec, reserve, workers_per_grade=per_grade) == expected


def test_default_reserve() -> None:
    assert default_reserve_bytes(H200_BYTES) == int(H200_BYTES * 0.06)  # 8.4 GiB
    assert format_bytes(default_reserve_bytes(H200_BYTES)) == "8.4 GiB"
    assert default_reserve_bytes(16 * GiB) == 2 * GiB  # 6% would be under 1 GiB


@pytest.mark.parametrize("grades", [1, 2, 3, 5, 8, 13])
def test_budgets_fit_the_gpu_above_the_floor(grades) -> None:
    budget = worker_budget_bytes(H200_BYTES, grades, workers_per_grade=2)
    assert 2 * grades * budget <= H200_BYTES - default_reserve_bytes(H200_BYTES)


def test_worker_budget_needs_a_grade() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        worker_budget_bytes(80 * GiB, 0)
    with pytest.raises(ValueError, match="at least 1"):
        worker_budget_bytes(80 * GiB, 1, workers_per_grade=0)


@pytest.mark.parametrize(("budget", "total", "expected"), [
    (8 * GiB, 80 * GiB, (8 * GiB - CUDA_CONTEXT_BYTES) / (80 * GiB)),  # the context is left out
    (CUDA_CONTEXT_BYTES // 2, 80 * GiB, 0.0),  # under the context alone: torch may allocate nothing
    (200 * GiB, 80 * GiB, 1.0),  # torch accepts at most 1
])
def test_first_guard_fraction(budget, total, expected) -> None:
    assert first_guard_fraction(budget, total) == pytest.approx(expected)


def test_first_guard_fraction_needs_a_total() -> None:
    with pytest.raises(ValueError):
        first_guard_fraction(GiB, 0)


@pytest.mark.parametrize(("count", "text"), [
    (int(12.4 * GiB), "12.4 GiB"), (8 * GiB, "8 GiB"), (1536 * MiB, "1.5 GiB"), (512 * MiB, "512 MiB"), (0, "0 MiB"),
])
def test_format_bytes(count, text) -> None:
    assert format_bytes(count) == text


# ---------------------------------------------------------------------------------------------- on a GPU

HOG = """
import sys, time, torch
kept = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(120)
"""


def _unshare_works() -> bool:
    if os.geteuid() != 0:
        return False
    try:
        return subprocess.run(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--", "true"],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.mark.gpu
@pytest.mark.parametrize("namespaced", [False, True], ids=["plain", "unshare-pid"])
def test_nvml_sees_a_torch_child_and_the_watchdog_stops_it(namespaced) -> None:
    pytest.importorskip("pynvml")  # the `gpu` extra (nvidia-ml-py): a GPU machine's install, not CI's
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if namespaced and not _unshare_works():
        pytest.skip("needs root and `unshare --pid`")
    reader = open_nvml_reader()
    command = [sys.executable, "-c", HOG, str(3 * GiB)]
    if namespaced:  # as the grader's workers run as root: the CUDA process is the leader's child
        command = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--", *command]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        holders = {p: used for p, used in reader.used_by_pid().items() if _in_group(p, child.pid)}
        if not namespaced:
            assert holders.get(child.pid, 0) >= 3 * GiB, f"NVML did not list {child.pid}: {holders}"
        assert sum(holders.values()) >= 3 * GiB, holders
        with MemoryWatchdog(reader) as watchdog:
            started = time.monotonic()
            watch = watchdog.watch(child.pid, 1 * GiB, "hog")
            eventually(lambda: watch.exceeded, timeout=10)
            stopped = time.monotonic() - started
        assert child.wait(timeout=10) == -signal.SIGKILL
        assert watch.peak_bytes >= 3 * GiB and "over its budget of 1 GiB: stopped" in (watch.message or "")
        forgotten = eventually(lambda: not set(reader.used_by_pid()) & set(holders), timeout=10)
        print(f"[{'unshare' if namespaced else 'plain'}] NVML saw {format_bytes(sum(holders.values()))} under "
              f"{sorted(holders)}; watch to kill {1000 * stopped:.0f} ms; NVML forgot it "
              f"{1000 * forgotten:.0f} ms after the child was reaped")
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        reader.close()


def _in_group(pid: int, group: int) -> bool:
    try:
        return os.getpgid(pid) == group
    except OSError:
        return False
