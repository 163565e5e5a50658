"""grader/running/processes/cpu_share.py: a deadline moves by the seconds its worker waited for a CPU, read from the
scheduler, never past its bound. (A real worker charged its own time: tests/running/processes/test_sandbox.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from grader.running.processes.client import Deadline
from grader.running.processes.cpu_share import MAX_STRETCH, LoadAllowance, run_queue_wait_s, stretched

SPIN = "while True: pass"


def test_a_deadline_stretches_by_the_wait_for_a_cpu_never_past_its_bound() -> None:
    assert stretched(limit=130.0, waited_s=0.0, started=100.0, allowed_s=30.0) == 130.0  # an idle machine: as before
    assert stretched(limit=130.0, waited_s=12.5, started=100.0, allowed_s=30.0) == 142.5  # 12.5 s waiting: owed
    assert stretched(limit=130.0, waited_s=500.0, started=100.0, allowed_s=30.0) == 100.0 + MAX_STRETCH * 30.0
    words = Deadline(30).describe(compiling=False, capped=True, waited_s=12.46)
    assert words == "did not finish within 30 s (not counting the 12.5 s it waited for a CPU other processes held)"
    assert Deadline(30).describe(compiling=False, capped=True, waited_s=0.2) == "did not finish within 30 s"


def test_the_wait_for_a_cpu_is_read_from_the_scheduler() -> None:
    if run_queue_wait_s(os.getpid()) is None:
        pytest.skip("no schedstat here (not Linux)")
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(2)]
    try:
        for spinner in spinners:
            os.sched_setaffinity(spinner.pid, {0})  # two spinners on one CPU: each waits about half the time
        allowance = LoadAllowance(spinners[0].pid)
        time.sleep(1.5)
        assert 0.3 < allowance.owed_s() < 1.5
        assert LoadAllowance(None).owed_s() == 0.0 and run_queue_wait_s(None) is None
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def test_a_submissions_own_load_buys_it_no_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Of the wait the scheduler reports, the CPU the worker's other threads and the sandbox's processes started
    since the request began took comes off; processes that were there before (the zygote) do not count."""
    from grader.running.processes import cpu_share

    clock = {"t": 0}
    schedstat = {10: [(1.0, 2.0), (1.5, 4.0)]}  # the worker's main thread: (on a CPU, waiting) at two moments
    stat = {10: [(3.0, 50.0), (4.2, 50.0)],  # the worker: all threads' CPU (its other threads ran 0.7 s), its start
            11: [(9.0, 20.0), (9.0, 20.0)],  # the zygote: started long before
            12: [(0.5, 100.0), (0.5, 100.0)]}  # a process of the sandbox started during the request: 0.5 s
    monkeypatch.setattr(cpu_share, "_schedstat", lambda pid: schedstat[pid][clock["t"]])
    monkeypatch.setattr(cpu_share, "_stat", lambda pid: stat[pid][clock["t"]])
    monkeypatch.setattr(cpu_share, "_since_boot_s", lambda: 99.0)
    allowance = cpu_share.LoadAllowance(10, lambda: [10, 11, 12])
    clock["t"] = 1
    assert allowance.owed_s() == pytest.approx(2.0 - 0.7 - 0.5)  # waited 2 s; 1.2 of it its own load
    assert cpu_share.LoadAllowance(10).owed_s() == 0.0  # a request starting now has waited nothing
