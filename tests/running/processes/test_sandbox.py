"""The sandbox's zygote forks warm workers; the grader's deadlines and kills hold (grader.running.processes.sandbox,
grader.running.processes.client). Real processes on the CPU interpreter backend."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from grader.running import protocol
from grader.running.processes.client import COMPILE_CREDIT_S, Deadline, Worker, WorkerFailure
from grader.running.processes.confinement import host_pid
from grader.running.processes.sandbox import Sandbox, SandboxFailure, WorkerOptions

SUBMISSION = '''
import os, subprocess, sys, time

def quick(x):
    return x + 1

def sleeps(x):
    time.sleep(60)
    return x

def leaves_a_daemon(x):
    marker = os.environ["TMPDIR"] + "/daemon.pid"
    code = ("import os, sys, time\\n"
            "if os.fork(): sys.exit(0)\\n"
            "os.setsid()\\n"
            f"open({marker!r}, 'w').write(str(os.getpid()))\\n"
            "time.sleep(120)\\n")
    subprocess.Popen([sys.executable, "-c", code], start_new_session=True).wait()
    for _ in range(100):
        if os.path.exists(marker):
            break
        time.sleep(0.05)
    return x

def spins(x):  # 1.2 s of its own CPU time
    until = time.process_time() + 1.2
    while time.process_time() < until:
        pass
    return x

def marks_and_sleeps(x):
    from grader.running.worker import progress  # a submission may write marks: they only stretch the cap
    for _ in range(30):
        progress.mark(progress.LAUNCH)
        time.sleep(0.1)
    time.sleep(60)
    return x

def compiles_then_sleeps(x):  # as Triton's JIT marks a compile (grader.running.worker.kernels)
    from grader.running.worker import progress
    progress.mark(progress.COMPILE_START)
    time.sleep(2.5)
    progress.mark(progress.COMPILE_END)
    time.sleep(float(x[0]))
    return x
'''
NAMES = ["quick", "sleeps", "leaves_a_daemon", "spins", "marks_and_sleeps", "compiles_then_sleeps"]


def call(name: str, value: float = 0.0) -> protocol.Call:
    return protocol.Call(function=name, storages=(torch.full((2,), value),),
                         views=({"storage": 0, "shape": [2], "stride": [1], "offset": 0},),
                         args=({"view": 0},), kwargs={})


@pytest.fixture
def sandbox(tmp_path: Path):
    box = Sandbox(WorkerOptions(backend="interpreter", import_timeout_s=60))
    box.start()
    yield box
    box.close()


def write_submission(folder: Path) -> Path:
    path = folder / "student" / "submission.py"
    path.parent.mkdir()
    path.write_text(SUBMISSION, encoding="utf-8")
    return path


@pytest.fixture
def submission(tmp_path: Path) -> Path:
    return write_submission(tmp_path)


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] in (b"Z", b"X")
    except OSError:
        return True


def test_workers_are_forked_warm_from_the_zygote(sandbox: Sandbox, submission: Path) -> None:
    ready = sandbox.ready()
    assert ready.ready and not ready.cuda_initialized
    assert {"torch", "triton", "grader.running.worker.harness"} <= set(ready.preloaded)
    assert "torch._dynamo" not in ready.preloaded  # 6 s on a GPU machine, and no worker needs it
    first = Worker(submission, NAMES, sandbox.options, sandbox=sandbox)
    assert first.start().ok and first.warm
    started = time.monotonic()
    second = Worker(submission, NAMES, sandbox.options, sandbox=sandbox)
    assert second.start().ok and second.warm
    assert time.monotonic() - started < 5.0  # a fork, not a fresh Python importing torch
    assert first.pid != second.pid and first.pid is not None and os.getpgid(first.pid) == first.pid
    reply = first.request(call("quick"), 30, "quick")
    assert reply.ok and reply.result is not None and torch.equal(reply.result["tensor"], torch.ones(2))
    for worker in (first, second):
        worker.close()


def test_a_worker_past_its_deadline_is_killed_by_the_grader(sandbox: Sandbox, submission: Path) -> None:
    worker = Worker(submission, NAMES, sandbox.options, sandbox=sandbox)
    assert worker.start().ok
    pid = worker.pid
    assert pid is not None
    started = time.monotonic()
    with pytest.raises(WorkerFailure) as failure:
        worker.request(call("sleeps"), Deadline(cap_s=2.0), "sleeping")
    assert failure.value.trap == "timeout" and failure.value.detail == "did not finish within 2 s (sleeping)"
    assert time.monotonic() - started < 5.0
    assert gone(pid)
    assert worker.start().ok  # the next request gets a fresh worker
    worker.close()


def test_a_worker_is_charged_its_own_time_not_the_machines_load(sandbox: Sandbox, submission: Path) -> None:
    """1.2 s of work within a 1.5 s deadline, on a CPU it shares with a spinner: it needs ~2.4 s of wall time, the
    ~1.2 s it waited for the CPU are not charged to it, so it finishes; the same deadline still stops a worker that
    sleeps (no wait for a CPU) at 1.5 s."""
    import subprocess
    import sys

    from grader.running.processes.cpu_share import run_queue_wait_s

    worker = Worker(submission, NAMES, sandbox.options, sandbox=sandbox)
    assert worker.start().ok and worker.pid is not None
    if run_queue_wait_s(worker.pid) is None:
        pytest.skip("no schedstat here (not Linux)")
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(spinner.pid, {0})
        os.sched_setaffinity(worker.pid, {0})
        started = time.monotonic()
        reply = worker.request(call("spins"), Deadline(cap_s=1.5), "spinning")
        assert reply.ok, reply.error
        assert time.monotonic() - started > 1.5  # past the deadline in wall time, within it in its own
    finally:
        spinner.kill()
        spinner.wait()
    started = time.monotonic()
    with pytest.raises(WorkerFailure) as failure:
        worker.request(call("sleeps"), Deadline(cap_s=1.5), "sleeping")
    assert failure.value.detail == "did not finish within 1.5 s (sleeping)"
    assert time.monotonic() - started < 3.0
    worker.close()


def test_no_progress_after_the_last_launch_ends_a_request(sandbox: Sandbox, submission: Path) -> None:
    """`run_s`: a request that made no progress mark for that long after a kernel launch is over, well before its
    cap; marks (even a submission's own) only move that point, never past the cap. Before any launch no kernel can
    be spinning (a fresh worker starting CUDA on a busy machine, say): only the cap holds it."""
    worker = Worker(submission, NAMES, sandbox.options, sandbox=sandbox)
    assert worker.start().ok
    started = time.monotonic()
    with pytest.raises(WorkerFailure) as failure:
        worker.request(call("sleeps"), Deadline(cap_s=2.5, run_s=1.0), "sleeping")
    assert failure.value.detail == "did not finish within 2.5 s (sleeping)"  # not "after its last kernel launch"
    assert 2.5 < time.monotonic() - started < 5.0
    assert worker.start().ok
    started = time.monotonic()
    with pytest.raises(WorkerFailure):
        worker.request(call("marks_and_sleeps"), Deadline(cap_s=60.0, run_s=1.0), "marking")
    assert 3.0 < time.monotonic() - started < 7.0  # 3 s of marks, then 1 s without
    worker.close()


def test_compiling_is_not_charged_to_a_requests_cap_up_to_the_workers_credit(
        sandbox: Sandbox, submission: Path) -> None:
    """A correct kernel with big tiles compiles for a minute, past a 30 s call limit: the seconds between compile
    marks (on the grader's clock) move the cap, while the worker's COMPILE_CREDIT_S lasts; the run itself is still
    held to the cap, and a worker out of credit is held to it with its compiling."""
    worker = Worker(submission, NAMES, sandbox.options, sandbox=sandbox)
    assert worker.start().ok
    started = time.monotonic()
    assert worker.request(call("compiles_then_sleeps", 0.5), Deadline(cap_s=1.5), "compiling").ok  # 2.5 s + 0.5
    assert time.monotonic() - started > 2.9
    assert 2.0 < COMPILE_CREDIT_S - worker.compile_credit_s < 3.0  # the seconds it compiled, spent
    with pytest.raises(WorkerFailure) as failure:  # compiled 2.5 s, then ran 2 s of a 1.5 s cap
        worker.request(call("compiles_then_sleeps", 2.0), Deadline(cap_s=1.5), "compiling")
    assert "did not finish within 1.5 s of running (besides 2.5 s of compiling Triton kernels)" in failure.value.detail
    assert worker.start().ok
    worker.compile_credit_s = 0.5
    with pytest.raises(WorkerFailure) as failure:  # out of credit: 0.5 s of its compiling moves the cap, no more
        worker.request(call("compiles_then_sleeps", 0.0), Deadline(cap_s=1.5), "compiling")
    assert "did not finish within 1.5 s: Triton was still compiling its kernels after 0.5 s more" \
        in failure.value.detail
    assert worker.compile_credit_s == 0.0
    worker.close()


def test_a_daemon_that_left_the_workers_group_dies_with_it(sandbox: Sandbox, submission: Path) -> None:
    worker = Worker(submission, NAMES, sandbox.options, sandbox=sandbox)
    assert worker.start().ok
    assert worker.request(call("leaves_a_daemon"), 30, "daemon").ok
    marker = worker.folder / "tmp" / "daemon.pid"
    daemon = int(marker.read_text())
    seen = daemon if not sandbox.isolated else host_pid(daemon, os.stat(f"/proc/{sandbox._zygote_pid}/ns/pid").st_ino)
    assert seen is not None and not gone(seen)
    worker.stop()
    for _ in range(50):
        if gone(seen):
            break
        time.sleep(0.05)
    assert gone(seen)
    worker.close()


def test_closing_the_sandbox_ends_every_process_it_started(submission: Path) -> None:
    box = Sandbox(WorkerOptions(backend="interpreter", import_timeout_s=60))
    box.start()
    workers = [Worker(submission, NAMES, box.options, sandbox=box) for _ in range(2)]
    for worker in workers:
        assert worker.start().ok
    pids = [w.pid for w in workers]
    box.close()
    time.sleep(0.2)
    assert all(pid is not None and gone(pid) for pid in pids)
    with pytest.raises(SandboxFailure):
        box.fork(box.root, "interpreter", ())


def test_a_sandbox_forks_only_workers_of_its_own_flavour(sandbox: Sandbox, submission: Path) -> None:
    """Triton decorates its library for the interpreter or not when it is imported: an interpreter zygote
    cannot make a GPU or ahead-of-time worker."""
    with pytest.raises(SandboxFailure, match="cannot fork"):
        sandbox.fork(sandbox.worker_folder(), "aot", ())
    worker = Worker(submission, NAMES, WorkerOptions(backend="aot", import_timeout_s=60), sandbox=sandbox)
    with pytest.raises(WorkerFailure, match="cannot fork"):
        worker.start()
    worker.close()


def test_deadline_words() -> None:
    assert Deadline(cap_s=5).describe(compiling=False, capped=True) == "did not finish within 5 s"
    assert "after its last kernel launch" in Deadline(cap_s=5, run_s=1).describe(compiling=False, capped=False)
    assert "compilation" in Deadline(cap_s=5, run_s=1, compile_s=3).describe(compiling=True, capped=False)


# ------------------------------------------------------------------------------------------- what a worker can reach


def test_sandboxes_live_in_a_folder_others_can_pass_through_but_not_list(sandbox: Sandbox) -> None:
    """Every sandbox runs as one user: a worker that could list their folder could write into another submission's."""
    import stat

    parent = sandbox.root.parent
    found = os.lstat(parent)
    assert stat.S_ISDIR(found.st_mode) and found.st_uid == os.geteuid()
    assert stat.S_IMODE(found.st_mode) == 0o711


def test_a_planted_sandbox_folder_is_passed_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    from grader.running.processes import confinement

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(confinement, "_parent", None)
    (tmp_path / f"grader-sandboxes-{os.geteuid()}").symlink_to(tmp_path / "elsewhere")  # planted by someone
    (tmp_path / "elsewhere").mkdir()
    chosen = confinement.sandbox_parent()
    assert chosen.parent == tmp_path and not chosen.is_symlink() and chosen.name != f"grader-sandboxes-{os.geteuid()}"
    assert confinement.sandbox_parent() == chosen  # one per process


def test_the_gpu_lock_files_are_hidden_from_every_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The grader holds the GPU's locks; a worker that could open a lock file could flock it (a read is enough) and
    stall every other grade's timing."""
    import sys

    from grader.running.processes.confinement import namespaces_available
    from grader.running.processes.gpu_slot import LOCK_DIR_VARIABLE, GpuSlot

    locks = tmp_path / "locks"
    monkeypatch.setenv(LOCK_DIR_VARIABLE, str(locks))
    with GpuSlot("gpu-under-test").shared():
        pass
    assert sorted(p.name for p in locks.iterdir())  # the lock files are there for the grader
    box = Sandbox(WorkerOptions(backend="interpreter", import_timeout_s=60))
    try:
        assert str(locks.resolve()) in box.hidden().split(":")
        if not namespaces_available():
            pytest.skip("folders are hidden only where the grader runs as root with unshare")
        folder = box.worker_folder()
        code = f"import os; print(sorted(os.listdir({str(locks)!r})))"
        process = box.popen([sys.executable, "-c", code], box.environment(folder, "interpreter"), folder,
                            folder / "out.log", ())
        assert process.wait(timeout=60) == 0, (folder / "out.log").read_text()
        assert (folder / "out.log").read_text().strip() == "[]"  # an empty folder mounted over it
    finally:
        box.close()


def test_a_lock_folder_that_cannot_be_made_hides_nothing_and_breaks_nothing(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.running.processes.gpu_slot import LOCK_DIR_VARIABLE

    (tmp_path / "file").write_text("", encoding="utf-8")
    monkeypatch.setenv(LOCK_DIR_VARIABLE, str(tmp_path / "file" / "locks"))  # under a file: mkdir fails
    box = Sandbox(WorkerOptions(backend="interpreter", import_timeout_s=60, hidden_paths=(str(tmp_path / "secret"),)))
    try:
        assert box.hidden() == str((tmp_path / "secret").resolve())  # the course's secrets still; no lock folder
    finally:
        box.close()


def test_a_worker_with_a_budget_of_its_own_is_watched_and_guarded_by_it(tmp_path: Path) -> None:
    """A kernel host that holds a timed case's tensors gets its own GPU budget (the seat's part, not the correctness
    share): the watchdog watches it against that budget and torch's first guard is set from it; a worker without one
    keeps the sandbox's, and a sandbox without a budget (no NVML, the interpreter) adds nothing."""
    from grader.running.processes.gpu_memory import CUDA_CONTEXT_BYTES, GiB
    from grader.running.processes.sandbox import MEMORY_FRACTION_VARIABLE, GpuBudget

    watched: list[tuple[int, int, str]] = []

    class Watchdog:
        def watch(self, pid: int, budget_bytes: int, label: str) -> str:
            watched.append((pid, budget_bytes, label))
            return "watch"

    budget = GpuBudget(Watchdog(), None, 2 * GiB, 80 * GiB)  # type: ignore[arg-type]
    cuda = Sandbox(WorkerOptions(backend="cuda", import_timeout_s=30), gpu_budget=budget)
    try:
        assert cuda.budget_environment(None) == ()
        ((name, value),) = cuda.budget_environment(8 * GiB)
        assert name == MEMORY_FRACTION_VARIABLE
        assert float(value) == pytest.approx((8 * GiB - CUDA_CONTEXT_BYTES) / (80 * GiB))
        env = cuda.environment(tmp_path, "cuda", cuda.budget_environment(8 * GiB))
        assert env[MEMORY_FRACTION_VARIABLE] == value  # over the sandbox's own fraction
        assert cuda.environment(tmp_path, "cuda")[MEMORY_FRACTION_VARIABLE] == f"{cuda.gpu_budget.fraction:.6f}"
        assert cuda.watch(11, "timer", 8 * GiB) == "watch" and cuda.watch(12, "worker") == "watch"
        assert watched == [(11, 8 * GiB, "timer"), (12, 2 * GiB, "worker")]
    finally:
        cuda.close()
    plain = Sandbox(WorkerOptions(backend="interpreter", import_timeout_s=30))
    try:
        assert plain.budget_environment(8 * GiB) == () and plain.watch(13, "worker", 8 * GiB) is None
    finally:
        plain.close()
