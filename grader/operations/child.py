"""A grading child process with a deadline, stopped together with its process group.

The child leads a session of its own (a Ctrl-C on the terminal reaches only whoever started it), its
stdout and stderr go to a log file, and stopping it signals the whole group: SIGTERM first (the
grading child then kills its workers, see grader.operations.executors), SIGKILL after a grace period.
Used by the batch executors (one child per submission) and, through them, the Gradescope bundle.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

TERMINATE_GRACE_S = 5.0
POLL_INTERVAL_S = 0.1


def signal_group(pid: int, sig: int) -> None:
    """Send `sig` to the process group `pid` leads; nothing if it is gone."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Child:
    """`command` started in `cwd` with `env`, output in `log`, due within `timeout_s` of its start.

    With `held`, the child gets a pipe on stdin and prepares (imports, a sandbox whose zygote imports torch)
    until `go()` writes to it; its deadline runs from `go()`."""

    def __init__(self, command: Sequence[str], cwd: Path, env: Mapping[str, str], log: Path,
                 timeout_s: float, held: bool = False) -> None:
        self.log = log
        self.timeout_s = timeout_s
        self.started_at = time.time()
        self._started = time.monotonic()
        self.held = held
        handle = open(log, "wb")  # noqa: SIM115 - handed to the child
        try:
            self.process = subprocess.Popen(
                list(command), cwd=cwd, env=dict(env),
                stdin=subprocess.PIPE if held else subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            handle.close()

    def go(self) -> None:
        """Let a held child grade; its deadline starts now."""
        if self.held and self.process.stdin is not None:
            try:
                self.process.stdin.write(b"go\n")
                self.process.stdin.close()
            except OSError:  # it already died: poll() says how
                pass
        self.held = False
        self.started_at = time.time()
        self._started = time.monotonic()

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self._started

    @property
    def overdue(self) -> bool:
        return not self.held and self.elapsed_s > self.timeout_s

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def poll(self) -> int | None:
        return self.process.poll()

    def terminate(self) -> None:
        """SIGTERM the child's group, SIGKILL it after a grace period."""
        signal_group(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=TERMINATE_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        signal_group(self.process.pid, signal.SIGKILL)
        try:
            self.process.wait(timeout=TERMINATE_GRACE_S)
        except subprocess.TimeoutExpired:
            pass

    def wait(self) -> int | None:
        """Wait for the child to end; its exit status, or None when it was stopped at its deadline."""
        while (code := self.poll()) is None:
            if self.overdue:
                self.terminate()
                return None
            time.sleep(POLL_INTERVAL_S)
        return code

    def tail(self, chars: int) -> str:
        """The last `chars` characters of the child's log ('' if there is none)."""
        try:
            with open(self.log, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - chars))
                return f.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""
