"""A grading child process with a deadline, stopped together with its process group.

The child leads a session of its own (a Ctrl-C on the terminal reaches only whoever started it), its
stdout and stderr go to a log file, and stopping it signals the whole group: SIGTERM first (the
grading child then kills its workers, see grader.operations.executors), SIGKILL after a grace period.
Used by the batch executors (one child per submission) and, through them, the Gradescope bundle. With a
`Template` (grader.operations.child_template) a `python -m` child is forked from a process that has imported the
grader already, instead of started afresh; it behaves the same.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from grader.operations.child_template import Template

TERMINATE_GRACE_S = 5.0
POLL_INTERVAL_S = 0.1


def signal_group(pid: int, sig: int) -> None:
    """Send `sig` to the process group `pid` leads, or to `pid` alone while it leads none yet (a forked child before
    its setsid); nothing if it is gone."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    except PermissionError:
        pass


class _Running(Protocol):
    pid: int

    def poll(self) -> int | None: ...

    def go(self) -> None: ...


class _Started:
    """A child started afresh (subprocess)."""

    def __init__(self, command: Sequence[str], cwd: Path, env: Mapping[str, str], log: Path, held: bool) -> None:
        handle = open(log, "wb")  # noqa: SIM115 - handed to the child
        try:
            self.process = subprocess.Popen(
                list(command), cwd=cwd, env=dict(env),
                stdin=subprocess.PIPE if held else subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            handle.close()
        self.pid = self.process.pid

    def poll(self) -> int | None:
        return self.process.poll()

    def go(self) -> None:
        if self.process.stdin is not None:
            try:
                self.process.stdin.write(b"go\n")
                self.process.stdin.close()
            except OSError:  # it already died: poll() says how
                pass


class _Forked:
    """A child forked from a batch's template."""

    def __init__(self, template: Template, command: Sequence[str], cwd: Path, env: Mapping[str, str], log: Path,
                 held: bool) -> None:
        self.template = template
        self.pid = template.start(command, cwd, env, log, held)

    def poll(self) -> int | None:
        return self.template.returncode(self.pid)

    def go(self) -> None:
        self.template.go(self.pid)


class Child:
    """`command` started in `cwd` with `env`, output in `log`, due within `timeout_s` of its start.

    With `held`, the child gets a pipe on stdin and prepares (imports, a sandbox whose zygote imports torch)
    until `go()` writes to it; its deadline runs from `go()`. With a `template`, the `python -m` command is forked from
    it (TemplateUnavailable if it cannot be: the caller starts it afresh, with the right parent in its arguments)."""

    def __init__(self, command: Sequence[str], cwd: Path, env: Mapping[str, str], log: Path,
                 timeout_s: float, held: bool = False, template: Template | None = None) -> None:
        self.log = log
        self.timeout_s = timeout_s
        self.started_at = time.time()
        self._started = time.monotonic()
        self.held = held
        self.returncode: int | None = None
        self.process: _Running = (_Started(command, cwd, env, log, held) if template is None
                                  else _Forked(template, command, cwd, env, log, held))

    def go(self) -> None:
        """Let a held child grade; its deadline starts now."""
        if self.held:
            self.process.go()
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

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.process.poll()
        return self.returncode

    def _wait(self, timeout_s: float) -> int | None:
        until = time.monotonic() + timeout_s
        while (code := self.poll()) is None and time.monotonic() < until:
            time.sleep(POLL_INTERVAL_S / 4)
        return code

    def terminate(self) -> None:
        """SIGTERM the child's group, SIGKILL it after a grace period."""
        signal_group(self.process.pid, signal.SIGTERM)
        if self._wait(TERMINATE_GRACE_S) is None:
            signal_group(self.process.pid, signal.SIGKILL)
            self._wait(TERMINATE_GRACE_S)

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
