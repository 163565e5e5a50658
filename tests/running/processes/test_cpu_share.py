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


def test_a_deadline_stretches_by_the_wait_for_a_cpu_never_past_its_bound() -> None:
    assert stretched(limit=130.0, waited_s=0.0, started=100.0, allowed_s=30.0) == 130.0  # an idle machine: as before
    assert stretched(limit=130.0, waited_s=12.5, started=100.0, allowed_s=30.0) == 142.5  # 12.5 s waiting: owed
    assert stretched(limit=130.0, waited_s=500.0, started=100.0, allowed_s=30.0) == 100.0 + MAX_STRETCH * 30.0
    words = Deadline(30).describe(compiling=False, capped=True, waited_s=12.46)
    assert words == "did not finish within 30 s of its own time (it also waited 12.5 s for a busy CPU, not counted)"
    assert Deadline(30).describe(compiling=False, capped=True, waited_s=0.2) == "did not finish within 30 s"


def test_the_wait_for_a_cpu_is_read_from_the_scheduler() -> None:
    if run_queue_wait_s(os.getpid()) is None:
        pytest.skip("no schedstat here (not Linux)")
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        for spinner in spinners:
            os.sched_setaffinity(spinner.pid, {0})  # two spinners on one CPU: each waits about half the time
        allowance = LoadAllowance(spinners[0].pid)
        time.sleep(1.5)
        assert 0.3 < allowance.waited_s() < 1.5
        assert LoadAllowance(None).waited_s() == 0.0 and run_queue_wait_s(None) is None
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
