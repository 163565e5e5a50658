"""grader/running/processes/shared_zygote.py: a batch's one zygote for every grade's reference workers. Real processes
on the CPU interpreter backend: two grades' sandboxes connect, each forks warm workers there, sees only its own, and
its workers end with its connection; the zygote ends with the batch."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
import torch

from grader.running import protocol
from grader.running.processes.client import Worker
from grader.running.processes.confinement import kill_marked
from grader.running.processes.sandbox import Sandbox, SandboxFailure, WorkerOptions
from grader.running.processes.shared_zygote import (
    ADDRESS_VARIABLE,
    SharedZygote,
    shared_address,
    zygote_environment,
)
from tests.running.processes.test_sandbox import NAMES, call, gone, write_submission

OPTIONS = WorkerOptions(backend="interpreter", import_timeout_s=60, sandbox_user=None)


@pytest.fixture
def shared():
    zygote = SharedZygote("interpreter")
    yield zygote
    zygote.close()


@pytest.fixture
def submission(tmp_path: Path) -> Path:
    return write_submission(tmp_path)


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[-1].split()[1])


def test_grades_fork_warm_workers_from_the_batchs_one_zygote(shared: SharedZygote, submission: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    assert stat.S_IMODE(os.stat(shared.folder).st_mode) == 0o700  # only the grader's user can reach the socket
    monkeypatch.setenv(ADDRESS_VARIABLE, shared.address)
    assert shared_address() == shared.address == shared.environment()[ADDRESS_VARIABLE]
    first, second = (Sandbox(OPTIONS, zygote_address=shared.address) for _ in range(2))
    try:
        ready = first.ready()
        assert ready.pid == shared.process.pid and not ready.cuda_initialized and "torch" in ready.preloaded
        assert not first.isolated  # the course's code, as the grader's user: no namespaces of its own
        started = time.monotonic()
        mine, theirs = Worker(submission, NAMES, OPTIONS, sandbox=first), Worker(submission, NAMES, OPTIONS,
                                                                               sandbox=second)
        assert mine.start().ok and theirs.start().ok and mine.warm and theirs.warm
        assert time.monotonic() - started < 10.0  # forks, not Python starts importing torch
        mine_pid, theirs_pid = mine.pid, theirs.pid
        assert mine_pid is not None and theirs_pid is not None
        assert parent_of(mine_pid) == parent_of(theirs_pid) == shared.process.pid
        reply = mine.request(call("quick"), 30, "quick")
        assert reply.ok and reply.result is not None and torch.equal(reply.result["tensor"], torch.ones(2))
        # a grade asks after its own workers only
        assert first._ask(protocol.Status(pid=theirs_pid)).exited is False
        kill_marked(first.token)  # the zygote carries no grade's token: this finds nobody
        assert not gone(mine_pid) and not gone(theirs_pid)
        mine.close()
        assert gone(mine_pid) and first.exit_status(mine_pid) == -9  # killed by the grader, reaped by the zygote
        first.close()  # its connection closes; the other grade's worker lives on
        time.sleep(1.0)
        assert not gone(theirs_pid) and theirs.request(call("quick"), 30, "quick").ok
        second.close()  # without closing its worker first: the zygote kills what the connection left
        deadline = time.monotonic() + 10
        while not gone(theirs_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gone(theirs_pid)
        theirs.close()
    finally:
        first.close()
        second.close()


def test_the_zygote_ends_with_the_batch_and_takes_its_workers(shared: SharedZygote, submission: Path) -> None:
    sandbox = Sandbox(OPTIONS, zygote_address=shared.address)
    worker = Worker(submission, NAMES, OPTIONS, sandbox=sandbox)
    try:
        assert worker.start().ok and worker.pid is not None
        pid = worker.pid
        shared.close()
        deadline = time.monotonic() + 10
        while not gone(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gone(pid) and gone(shared.process.pid) and not shared.folder.exists()
    finally:
        worker.close()
        sandbox.close()


def test_an_unreachable_zygote_is_a_sandbox_failure(tmp_path: Path) -> None:
    sandbox = Sandbox(OPTIONS, zygote_address=str(tmp_path / "nobody-listens.sock"))
    try:
        with pytest.raises(SandboxFailure, match="shared zygote could not be reached"):
            sandbox.ready()
    finally:
        sandbox.close()


def test_the_zygotes_environment_carries_no_token_and_picks_tritons_flavour(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRADER_WORKER_TOKEN", "abc")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    cuda = zygote_environment("cuda", tmp_path)
    assert "GRADER_WORKER_TOKEN" not in cuda and "AWS_SECRET_ACCESS_KEY" not in cuda and "TRITON_INTERPRET" not in cuda
    assert cuda["CUDA_VISIBLE_DEVICES"] == "1" and cuda["HOME"] == str(tmp_path)
    assert zygote_environment("interpreter", tmp_path)["TRITON_INTERPRET"] == "1"
