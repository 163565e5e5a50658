"""grader/running/cases/workers.py: the submission's workers, started on demand in a real sandbox on the
interpreter: an import that fails is said once and not retried; a request that crashes the worker comes back as
what the case observed, and the next request starts a fresh worker; every worker is stopped on demand."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import torch

from grader import trap_ids
from grader.authoring.spec import Assignment, load_assignment
from grader.backends import Backend
from grader.evidence.observation import Observation
from grader.running import protocol
from grader.running.cases.workers import SubmissionWorkers
from grader.running.phases import PhaseClock
from grader.running.processes.sandbox import Sandbox, sandbox_options
from tests.conftest import ROOT

SOFTMAX = load_assignment(ROOT / "assignments" / "softmax" / "assignment.toml")


def workers_for(text: str, tmp_path: Path, assignment: Assignment = SOFTMAX) -> SubmissionWorkers:
    submission = tmp_path / "student" / "softmax.py"
    submission.parent.mkdir()
    submission.write_text(text, encoding="utf-8")
    sandbox = Sandbox(sandbox_options(assignment, submission, "interpreter"))
    sandbox.start()
    return SubmissionWorkers(assignment, submission, Backend.INTERPRETER, sandbox, PhaseClock(),
                             prestart_replayer=False)


@pytest.mark.slow
def test_an_import_that_fails_is_said_once(tmp_path: Path) -> None:
    workers = workers_for("import torch\nraise ValueError('not today')\n", tmp_path)
    try:
        problem = workers.ensure()
        assert problem is not None and problem.trap == trap_ids.IMPORT_FAILS and problem.at_import
        assert "could not be imported: ValueError (softmax.py, line 2" in problem.message
        assert workers.symbol_problem("softmax") is problem  # deterministic: not imported again
        assert "start-up" in workers.clock.seconds
    finally:
        workers.close()
        workers.sandbox.close()


@pytest.mark.slow
def test_an_import_that_never_returns_costs_one_timeout(tmp_path: Path) -> None:
    quick = dataclasses.replace(SOFTMAX, import_timeout_s=2.0)
    workers = workers_for("import time\nwhile True:\n    time.sleep(0.01)\n", tmp_path, quick)
    try:
        problem = workers.ensure()
        assert problem is not None and problem.trap == trap_ids.TIMEOUT and problem.at_import
        assert problem.message.startswith("Importing softmax.py did not finish within 2 s: code at module level")
        assert problem.message.count("softmax.py") == 1
        started = time.monotonic()
        assert workers.symbol_problem("softmax") is problem and workers.ensure() is problem  # not imported again
        assert time.monotonic() - started < 0.5
    finally:
        workers.close()
        workers.sandbox.close()


@pytest.mark.slow
def test_a_crash_is_observed_and_the_next_request_gets_a_fresh_worker(tmp_path: Path) -> None:
    text = "import os\n\ndef softmax(x):\n    os._exit(3)\n\ndef softmax_kernel():\n    pass\n"
    workers = workers_for(text, tmp_path)
    call = protocol.Call(function="softmax", storages=(torch.zeros(2),),
                         views=({"storage": 0, "shape": [2], "stride": [1], "offset": 0},), args=({"view": 0},),
                         kwargs={})
    try:
        assert workers.ensure() is None and workers.symbol_problem("softmax") is None
        first_pid = workers.worker.pid
        observed = workers.request(call, "softmax(...)")
        assert isinstance(observed, Observation) and observed.trap == trap_ids.CRASH
        assert "softmax(...) crashed the worker" in observed.message and "exit code 3" in observed.message
        assert workers.loaded is None and workers.ensure() is None and workers.worker.pid != first_pid
        workers.stop()
        assert not workers.worker.alive and workers.loaded is None
    finally:
        workers.close()
        workers.sandbox.close()


def test_a_case_alone_on_the_gpu_holds_the_slot_every_timed_phase_takes(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """probes.TimeoutsAlone's run alone: while it holds the GPU no other grade's shared work enters (their
    correctness waits), and its own requests (which take the GPU shared) do not wait for itself."""
    import threading

    from grader.running.cases import workers as workers_module
    from grader.running.processes.gpu_slot import LOCK_DIR_VARIABLE, GpuSlot

    monkeypatch.setenv(LOCK_DIR_VARIABLE, str(tmp_path / "locks"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(workers_module, "gpu_name", lambda: "GPU-test")
    submission = tmp_path / "softmax.py"
    submission.write_text("", encoding="utf-8")
    workers = SubmissionWorkers(SOFTMAX, submission, Backend.CUDA,
                                Sandbox(sandbox_options(SOFTMAX, submission, "cuda")), PhaseClock(),
                                prestart_replayer=False)
    entered: list[float] = []

    def neighbour() -> None:
        with GpuSlot("GPU-test").shared():
            entered.append(time.monotonic())

    with workers.alone_on_gpu():
        other = threading.Thread(target=neighbour)
        other.start()
        with workers.shared_gpu():  # its own case's request: no wait for itself
            time.sleep(0.3)
        assert entered == []
        let_go = time.monotonic()
    other.join(5)
    assert len(entered) == 1 and entered[0] >= let_go
    with workers.shared_gpu():  # afterwards, shared as before
        pass
