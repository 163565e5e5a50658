"""grader/running/processes/client.py without a worker: what a deadline says when it ends a request, and the
exception a worker that did not answer raises. (Real workers, deadlines and kills: tests/running/test_sandbox.py.)"""

from __future__ import annotations

import contextlib

import pytest

from grader.running.processes.client import Deadline, WorkerFailure


def test_deadline_describes_why_it_ended() -> None:
    assert Deadline(30).describe(compiling=False, capped=False) == "did not finish within 30 s"
    gpu = Deadline(120, run_s=10.5, compile_s=60)
    assert gpu.describe(compiling=False, capped=True) == "did not finish within 120 s"
    assert gpu.describe(compiling=True, capped=False) == "a compilation did not finish within 60 s"
    assert gpu.describe(compiling=False, capped=False) == ("did not finish: nothing happened for 10.5 s after its "
                                                           "last kernel launch")


def test_worker_failure_names_its_trap_and_survives_a_context_manager() -> None:
    failure = WorkerFailure("timeout", "no answer after 2 s", "tail")
    assert (failure.trap, str(failure), failure.output_tail) == ("timeout", "no answer after 2 s", "tail")

    @contextlib.contextmanager
    def block():
        yield

    with pytest.raises(WorkerFailure) as caught, block():  # contextlib sets __traceback__ on the way out
        raise failure
    assert caught.value.trap == "timeout"


def test_a_deadline_stretches_by_the_wait_for_a_cpu_never_past_its_bound() -> None:
    from grader.running.processes.cpu_share import MAX_STRETCH, stretched

    assert stretched(limit=130.0, waited_s=0.0, started=100.0, allowed_s=30.0) == 130.0  # an idle machine: as before
    assert stretched(limit=130.0, waited_s=12.5, started=100.0, allowed_s=30.0) == 142.5  # 12.5 s waiting: owed
    assert stretched(limit=130.0, waited_s=500.0, started=100.0, allowed_s=30.0) == 100.0 + MAX_STRETCH * 30.0
    words = Deadline(30).describe(compiling=False, capped=True, waited_s=12.46)
    assert words == "did not finish within 30 s of its own time (it also waited 12.5 s for a busy CPU, not counted)"
    assert Deadline(30).describe(compiling=False, capped=True, waited_s=0.2) == "did not finish within 30 s"


def test_the_wait_for_a_cpu_is_read_from_the_scheduler() -> None:
    import os
    import subprocess
    import sys
    import time

    from grader.running.processes.cpu_share import LoadAllowance, run_queue_wait_s

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
