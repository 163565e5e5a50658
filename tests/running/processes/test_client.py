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

