"""grader/operations/child.py: a grading child with a deadline: its output in a log, held until `go()`,
stopped with its whole process group (SIGTERM, then SIGKILL for one that ignores it)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from grader.operations import child as child_module
from grader.operations.child import Child

IGNORES_TERM_WITH_A_GRANDCHILD = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(grandchild.pid, flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_exit_status_and_log(tmp_path: Path) -> None:
    child = Child([sys.executable, "-c", "import sys; print('graded'); sys.exit(3)"], tmp_path, dict(os.environ),
                  tmp_path / "log", timeout_s=60)
    assert child.wait() == 3 and child.returncode == 3
    assert child.tail(100) == "graded" and child.tail(4) == "ded"  # the last characters, stripped


def test_held_until_go(tmp_path: Path) -> None:
    code = "import sys; sys.stdin.readline(); print('went')"
    child = Child([sys.executable, "-c", code], tmp_path, dict(os.environ), tmp_path / "log", timeout_s=0.01,
                  held=True)
    time.sleep(0.3)
    assert not child.overdue and child.poll() is None  # a held child's deadline has not started
    child.timeout_s = 60
    child.go()
    assert child.wait() == 0 and child.tail(100) == "went"


def test_overdue_stops_the_whole_group(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(child_module, "TERMINATE_GRACE_S", 1.0)
    child = Child([sys.executable, "-c", IGNORES_TERM_WITH_A_GRANDCHILD], tmp_path, dict(os.environ),
                  tmp_path / "log", timeout_s=1.0)
    deadline = time.monotonic() + 60
    while not child.tail(100) and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int(child.tail(100))
    assert child.wait() is None  # stopped at its deadline
    assert not alive(child.pid)
    deadline = time.monotonic() + 10
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(grandchild)  # the group went with it


def test_missing_log_tail_is_empty(tmp_path: Path) -> None:
    child = Child([sys.executable, "-c", "pass"], tmp_path, dict(os.environ), tmp_path / "log", timeout_s=60)
    child.wait()
    (tmp_path / "log").unlink()
    assert child.tail(10) == ""
