"""grader/running/processes/confinement.py: a process started under the confinement gets its limits (a file size
cap, no core dumps) before it runs anything; a sandbox's token finds and kills every process that carries it,
escaped daemons too; exit statuses read in words; who a sandbox runs as."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time

from grader.running.processes.confinement import (
    TOKEN_VARIABLE,
    WORKER_OUTPUT_LIMIT_BYTES,
    confine,
    describe_exit,
    kill_marked,
    sandbox_identity,
)


def test_exit_statuses_in_words() -> None:
    assert describe_exit(None) == "no exit status"
    assert describe_exit(3) == "exit code 3"
    assert describe_exit(-signal.SIGKILL) == "signal SIGKILL"
    assert describe_exit(-250) == "signal 250"


def test_a_confined_process_gets_its_limits_before_it_runs() -> None:
    probe = ("import resource; "
             "print(resource.getrlimit(resource.RLIMIT_FSIZE)[0], resource.getrlimit(resource.RLIMIT_CORE)[0])")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True,
                          preexec_fn=lambda: confine("cuda", None, isolated=True))  # noqa: PLW1509
    assert done.stdout.split() == [str(WORKER_OUTPUT_LIMIT_BYTES), "0"]
    assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] != WORKER_OUTPUT_LIMIT_BYTES  # the grader's own: untouched


def test_every_process_carrying_the_token_is_killed() -> None:
    token = "test-" + os.urandom(4).hex()
    env = dict(os.environ, **{TOKEN_VARIABLE: token})
    # a process that leaves a daemon behind: a new session, re-parented away from its parent
    parent = subprocess.Popen([sys.executable, "-c", "import os, time, subprocess, sys; "
                               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], "
                               "start_new_session=True); time.sleep(120)"], env=env)
    time.sleep(1.0)
    kill_marked(token)
    parent.wait(timeout=10)  # killed (and perhaps reaped by kill_marked itself, which reaps what it killed)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        marked = [e.name for e in os.scandir("/proc") if e.name.isdigit() and _carries(int(e.name), token)]
        if not marked:
            break
        time.sleep(0.1)
    assert marked == []


def test_without_root_a_sandbox_keeps_the_graders_user() -> None:
    assert sandbox_identity(None) is None
    if os.geteuid() != 0:
        assert sandbox_identity("nobody") is None


def _carries(pid: int, token: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read().split(b"\0")
    except OSError:
        return False
    if f"{TOKEN_VARIABLE}={token}".encode() not in environ:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def test_a_process_that_asked_to_die_with_its_parent_does() -> None:
    """confinement.die_with_parent, which a sandbox, the batch's shared zygotes and a batch's children call: the
    child of a parent that exits is gone with it (SIGKILL by default)."""
    script = (
        "import os, sys, time\n"
        "from grader.running.processes.confinement import die_with_parent\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    die_with_parent()\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "print(child, flush=True)\n"
        "time.sleep(0.5)\n"  # the child has asked by now
    )
    parent = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=True)
    child = int(parent.stdout.strip())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{child}/stat", encoding="ascii") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        raise AssertionError("the child outlived its parent")
