"""A batch's shared zygote for trusted workers: every grade's reference-solution worker forks from one process.

Each CUDA grade times the student's kernels in turn with the reference solution's, in a worker of its own. Started
afresh, that worker imports torch (CUDA build) and triton in every grade: seconds of wall and ~8-10 CPU-seconds a grade
on an H100 (docs/performance.md), which a class of 60 pays 60 times. A batch (grader.operations.executors) therefore
starts one `SharedZygote`: `python -m grader.running.worker.zygote --listen FD`, which imports them once and forks a
worker per request, exactly as a sandbox's zygote does. It listens on a Unix socket in a folder of its own that only
the grader's user can enter (0700; student workers run as another user and have the sandbox parent's other folders
hidden); each grade learns the address from $GRADER_SHARED_ZYGOTE and its reference sandbox connects there
(`Sandbox(zygote_address=...)`) instead of starting a process. Only the course's reference solution is forked there,
as the grader's user, like the fresh process it replaces; no student code, no kernel host and no tool-wrapped worker
(Nsight Compute's) ever is. A grade sees only its own workers, and they die when its connection closes; the zygote
dies with the batch. The zygote's environment carries no sandbox token (`kill_marked` of one grade never finds
another grade's reference worker).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from grader.running.processes.confinement import PROJECT_ROOT, TOKEN_VARIABLE
from grader.running.processes.sandbox import PASSED_ENVIRONMENT

ADDRESS_VARIABLE = "GRADER_SHARED_ZYGOTE"
_PR_SET_PDEATHSIG = 1


def shared_address() -> str | None:
    """The batch's shared zygote, where this grade runs in a batch that started one."""
    return os.environ.get(ADDRESS_VARIABLE) or None


def zygote_environment(backend: str, folder: Path) -> dict[str, str]:
    """Pure but for the caller's environment: what the shared zygote imports with (no sandbox token)."""
    env = {k: v for k, v in os.environ.items() if k in PASSED_ENVIRONMENT}
    env.update(PYTHONPATH=str(PROJECT_ROOT), PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", PYTHONNOUSERSITE="1",
               HOME=str(folder), TMPDIR=str(folder))
    if backend == "interpreter":
        env["TRITON_INTERPRET"] = "1"
    env.pop(TOKEN_VARIABLE, None)
    return env


def _die_with_batch() -> None:  # child, pre-exec
    import ctypes

    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class SharedZygote:
    """The batch's side: the zygote process, its folder and its address (`environment` tells the batch's children)."""

    def __init__(self, backend: str) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="grader-shared-zygote-"))  # 0700: only the grader's user enters
        self.address = str(self.folder / "zygote.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self.address)  # bound before the zygote starts: a grade's connect waits in the backlog
            listener.listen(128)
            with open(self.folder / "zygote.log", "ab") as log:
                self.process: subprocess.Popen[bytes] = subprocess.Popen(
                    [sys.executable, "-m", "grader.running.worker.zygote", "--listen", str(listener.fileno())],
                    env=zygote_environment(backend, self.folder), cwd=self.folder, stdin=subprocess.DEVNULL,
                    stdout=log, stderr=log, pass_fds=(listener.fileno(),), start_new_session=True,
                    preexec_fn=_die_with_batch)  # noqa: PLW1509 - the batch is single-threaded when it starts it
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        finally:
            listener.close()

    def environment(self) -> dict[str, str]:
        return {ADDRESS_VARIABLE: self.address}

    def close(self) -> None:
        """The zygote and every worker it forked (each leads a group of its own; they die with it: PDEATHSIG)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        shutil.rmtree(self.folder, ignore_errors=True)
