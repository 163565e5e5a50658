"""grader/running/worker/zygote_template.py: a batch's sandbox zygotes forked from one process that imported their
preload, each confined in the fork as the fresh zygote's `unshare`/`setpriv` command confines it. Real processes on
the CPU interpreter backend, compared with a fresh sandbox's: the same user, namespaces of its own, the same folders
hidden, nothing of the template's open, and everything gone with the sandbox."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from grader.running import protocol
from grader.running.processes.client import Worker
from grader.running.processes.confinement import namespaces_available
from grader.running.processes.sandbox import Sandbox, WorkerOptions
from grader.running.processes.shared_zygote import TEMPLATE_ADDRESS_VARIABLE, ZygoteTemplate, template_address
from grader.running.worker.zygote import receive_control, send_control
from tests.running.processes.test_sandbox import NAMES, call, gone, write_submission

pytestmark = pytest.mark.skipif(not namespaces_available(), reason="needs root and PID/mount/network namespaces")


@pytest.fixture
def template(monkeypatch: pytest.MonkeyPatch):
    started = ZygoteTemplate("interpreter")
    monkeypatch.setenv(TEMPLATE_ADDRESS_VARIABLE, started.environment()[TEMPLATE_ADDRESS_VARIABLE])
    yield started
    started.close()


@pytest.fixture
def submission(tmp_path: Path) -> Path:
    return write_submission(tmp_path)


def facts(pid: int) -> dict[str, object]:
    """What confines a process, read from outside it."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    uid = next(line.split()[1:] for line in status if line.startswith("Uid:"))
    groups = next(line.split()[1:] for line in status if line.startswith("Groups:"))
    no_new_privs = next(line.split()[1] for line in status if line.startswith("NoNewPrivs:"))
    return {"uid": uid, "groups": groups, "no_new_privs": no_new_privs,
            **{ns: os.stat(f"/proc/{pid}/ns/{ns}").st_ino for ns in ("pid", "net", "mnt")}}


def test_a_forked_zygote_is_confined_as_a_fresh_one(template: ZygoteTemplate, submission: Path,
                                                   tmp_path: Path) -> None:
    secret = tmp_path / "course"
    secret.mkdir()
    (secret / "hidden_cases.toml").write_text("x")
    options = WorkerOptions(backend="interpreter", import_timeout_s=60, hidden_paths=(str(secret),))
    assert template_address("interpreter") == template.address and template_address("cuda") is None
    forked, fresh = Sandbox(options), Sandbox(options)
    try:
        forked.start()
        assert forked._forked_zygote is not None and forked._zygote is None  # from the template, not a process
        monkeypatch_free = os.environ.pop(TEMPLATE_ADDRESS_VARIABLE)
        fresh.start()
        os.environ[TEMPLATE_ADDRESS_VARIABLE] = monkeypatch_free
        assert fresh._forked_zygote is None and fresh._zygote is not None
        for sandbox in (forked, fresh):
            ready = sandbox.ready()
            assert ready.ready and ready.pid == 1 and not ready.cuda_initialized  # PID 1 of a namespace of its own
        workers = {name: Worker(submission, NAMES, options, sandbox=box) for name, box in
                   (("forked", forked), ("fresh", fresh))}
        for worker in workers.values():
            assert worker.start().ok and worker.warm
            assert worker.request(call("quick"), 30, "quick").ok
        ours = facts(os.getpid())
        seen = {name: facts(w.pid) for name, w in workers.items() if w.pid is not None}
        for name in ("forked", "fresh"):
            assert seen[name]["uid"] == seen["fresh"]["uid"], name  # the sandbox's user (nobody where it can be)
            assert (seen[name]["uid"] != ours["uid"]) == (forked.identity is not None), name
            assert seen[name]["groups"] == seen["fresh"]["groups"], name
            if forked.identity is not None:  # setpriv's --clear-groups --no-new-privs
                assert seen[name]["groups"] == [] and seen[name]["no_new_privs"] == "1", name
            for ns in ("pid", "net", "mnt"):
                assert seen[name][ns] != ours[ns], (name, ns)
            pid = workers[name].pid
            assert os.listdir(f"/proc/{pid}/root{secret}") == [], name  # hidden under an empty tmpfs
        assert seen["forked"]["no_new_privs"] == "1"  # always, the grader's user or not
        for name, box in (("forked", forked), ("fresh", fresh)):  # the submission's own load (cpu_share), found
            assert workers[name].pid in box.own_processes(), name  # though a fork shows the template's environment
        assert workers["forked"].pid not in fresh.own_processes()
        assert forked._zygote_pid is not None
        zygote_fds = sorted(int(fd) for fd in os.listdir(f"/proc/{forked._zygote_pid}/fd"))
        assert zygote_fds == [0, 1, 2, 3], zygote_fds  # its control channel, and nothing of the template's
        environ = Path(f"/proc/{forked._zygote_pid}/environ").read_bytes()
        assert b"GRADER_ZYGOTE_TEMPLATE" not in environ and b"GRADER_WORKER_TOKEN" not in environ
        worker_pid, zygote_pid = workers["forked"].pid, forked._zygote_pid
        for worker in workers.values():
            worker.close()
    finally:
        forked.close()
        fresh.close()
    time.sleep(0.2)
    assert worker_pid is not None and gone(worker_pid) and gone(zygote_pid)


def test_a_sandbox_of_another_flavour_or_a_bad_request_gets_no_zygote(template: ZygoteTemplate,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEMPLATE_ADDRESS_VARIABLE, f"cuda:{template.address}")  # a template of the wrong flavour
    sandbox = Sandbox(WorkerOptions(backend="cuda", import_timeout_s=60))
    try:
        assert not sandbox._start_from_template(template.address)  # refused: the grade starts a fresh one
    finally:
        sandbox.close()
    import socket

    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(template.address)
    try:
        send_control(connection, protocol.encode(protocol.Status(pid=1)))  # not a StartZygote
        with pytest.raises(EOFError):
            receive_control(connection, 30)
    finally:
        connection.close()


def test_the_template_ends_with_the_batch_and_takes_its_zygotes(template: ZygoteTemplate) -> None:
    sandbox = Sandbox(WorkerOptions(backend="interpreter", import_timeout_s=60))
    try:
        sandbox.start()
        sandbox.ready()
        zygote = sandbox._zygote_pid
        assert zygote is not None and not gone(zygote)
        template.close()
        deadline = time.monotonic() + 10
        while not gone(zygote) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gone(zygote) and not template.folder.exists()
    finally:
        sandbox.close()


def test_a_forked_zygote_imports_from_its_folder_not_the_templates(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.running.worker.zygote_template import _move_to

    template_folder, sandbox_folder = tmp_path / "template", tmp_path / "sandbox"
    template_folder.mkdir()
    sandbox_folder.mkdir()
    monkeypatch.chdir(template_folder)
    monkeypatch.setattr("sys.path", [str(template_folder), "/usr/lib/python3.12"])
    _move_to(str(sandbox_folder))
    import sys

    assert sys.path == [str(sandbox_folder), "/usr/lib/python3.12"]  # a fresh `python -m` there has the same
    assert Path.cwd() == sandbox_folder


def test_a_grades_gpu_compile_check_forks_from_the_batchs_aot_template(monkeypatch: pytest.MonkeyPatch) -> None:
    """An interpreter batch's second template (Triton without the interpreter): each grade's GPU compile check
    (grader/running/aot.py) forks its worker from there instead of importing torch and triton afresh, with the same
    results; the variable holds both templates."""
    from grader.authoring.spec import load_assignment
    from grader.running.aot import aot_check
    from tests.conftest import ROOT

    assignment = load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")
    submission = ROOT / "reference" / "fused_layers" / "reference.py"
    fresh = aot_check(assignment, submission)
    interpreter, aot = ZygoteTemplate("interpreter"), ZygoteTemplate("aot")
    forked: list[str] = []
    start_from_template = Sandbox._start_from_template

    def recorded(self: Sandbox, address: str) -> bool:
        forked.append(self.options.backend)
        return start_from_template(self, address)

    try:
        told = ",".join(t.environment()[TEMPLATE_ADDRESS_VARIABLE] for t in (interpreter, aot))
        monkeypatch.setenv(TEMPLATE_ADDRESS_VARIABLE, told)
        assert template_address("interpreter") == interpreter.address and template_address("aot") == aot.address
        monkeypatch.setattr(Sandbox, "_start_from_template", recorded)
        from_template = aot_check(assignment, submission)
    finally:
        interpreter.close()
        aot.close()
    assert forked == ["aot"]
    assert [(r.case_id, r.passed, r.traps) for r in from_template[0]] == [(r.case_id, r.passed, r.traps)
                                                                          for r in fresh[0]]
    assert all(r.passed for r in from_template[0]) and from_template[1] == fresh[1] == []
