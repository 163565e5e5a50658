"""What a batch starts once so that its grades do not each import torch and triton: two zygotes it shares.

Each grade of a batch starts a sandbox zygote for the student's workers and, on CUDA, a worker for the reference
solution; started afresh, each imports torch (CUDA build) and triton: seconds of wall and ~8-12 CPU-seconds apiece per
grade on an H100 (docs/performance.md), which a class of 60 pays 60 times. A local batch
(grader.operations.batch_helpers) therefore starts, listening on Unix sockets in folders only the grader's user can
enter (0700; student workers run as another user, in namespaces that hide the grader's folders):

- `SharedZygote` (`python -m grader.running.worker.zygote --listen FD`, CUDA batches): every grade's reference worker
  forks from it, exactly as a sandbox zygote forks workers. Only the course's reference solution is forked there, as
  the grader's user, like the fresh process it replaces; no student code, no kernel host and no tool-wrapped worker
  (Nsight Compute's) ever is. A grade sees only its own workers; they die when its connection closes. Its
  environment carries no sandbox token (`kill_marked` of one grade never finds another grade's reference worker).
- `ZygoteTemplate` (`python -m grader.running.worker.zygote_template --listen FD BACKEND`, where sandboxes are
  isolated): every grade's sandbox zygote is a fork of it, confined in the child as the fresh zygote's command would
  be (namespaces, hidden folders, the sandbox's user); it reads nothing itself, so no grade's data is in the memory
  another grade's sandbox inherits.

Each grade learns the addresses from its environment ($GRADER_SHARED_ZYGOTE, $GRADER_ZYGOTE_TEMPLATE) and falls back
to a fresh process where one cannot be reached."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from grader.running.processes.confinement import base_environment, die_with_parent

ADDRESS_VARIABLE = "GRADER_SHARED_ZYGOTE"
TEMPLATE_ADDRESS_VARIABLE = "GRADER_ZYGOTE_TEMPLATE"  # "<backend>:<address>[,<backend>:<address>]"


def shared_address() -> str | None:
    """The batch's shared zygote, where this grade runs in a batch that started one."""
    return os.environ.get(ADDRESS_VARIABLE) or None


def zygote_environment(backend: str, folder: Path) -> dict[str, str]:
    """Pure but for the caller's environment: what the shared zygote imports with (no sandbox token)."""
    return base_environment(backend, folder)


class _Listening:
    """A process the batch starts once, listening on a Unix socket in a folder of its own (0700: only the grader's user
    can enter it), told `environment()` to every child; it dies with the batch (PR_SET_PDEATHSIG) and with `close`."""

    module = ""
    variable = ""

    def __init__(self, backend: str) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix=f"grader-{self.module.rsplit('.', 1)[-1]}-"))
        self.address = str(self.folder / "listening.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self.address)  # bound before the process starts: a grade's connect waits in the backlog
            listener.listen(128)
            with open(self.folder / "process.log", "ab") as log:
                self.process: subprocess.Popen[bytes] = subprocess.Popen(
                    [sys.executable, "-m", self.module, "--listen", str(listener.fileno()), *self.arguments(backend)],
                    env=zygote_environment(backend, self.folder), cwd=self.folder, stdin=subprocess.DEVNULL,
                    stdout=log, stderr=log, pass_fds=(listener.fileno(),), start_new_session=True,
                    preexec_fn=die_with_parent)  # noqa: PLW1509 - the batch is single-threaded when it starts it
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        finally:
            listener.close()

    def arguments(self, backend: str) -> list[str]:
        return []

    def environment(self) -> dict[str, str]:
        return {self.variable: self.address}

    def close(self) -> None:
        """The process and every one it forked (they die with it: PDEATHSIG)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        shutil.rmtree(self.folder, ignore_errors=True)


class SharedZygote(_Listening):
    """The zygote of every grade's reference workers (`python -m grader.running.worker.zygote --listen FD`)."""

    module = "grader.running.worker.zygote"
    variable = ADDRESS_VARIABLE


class ZygoteTemplate(_Listening):
    """What every grade's sandbox zygote is forked from (`python -m grader.running.worker.zygote_template --listen FD
    BACKEND`): a process that imported the zygote's preload for `backend`'s Triton, forking one confined child per
    connection (grader.running.worker.zygote_template)."""

    module = "grader.running.worker.zygote_template"
    variable = TEMPLATE_ADDRESS_VARIABLE

    def __init__(self, backend: str) -> None:
        self.backend = backend
        super().__init__(backend)

    def arguments(self, backend: str) -> list[str]:
        return [backend]

    def environment(self) -> dict[str, str]:
        return {self.variable: f"{self.backend}:{self.address}"}


def template_address(backend: str) -> str | None:
    """The batch's zygote template, where this grade runs in a batch that started one for `backend` (the variable
    holds one "<backend>:<address>" per template, comma-separated)."""
    for told in os.environ.get(TEMPLATE_ADDRESS_VARIABLE, "").split(","):
        found, _, address = told.partition(":")
        if found == backend and address:
            return address
    return None
