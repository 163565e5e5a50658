"""A batch's children forked from a template process that has already imported the grader, torch and triton.

A grading child started as `python -m grader.operations.executors ...` spends seconds of CPU importing torch, triton
and the grader before it grades (on a GPU machine torch's CUDA build: 4-5 CPU-seconds of a grade's ~74, measured on
an H100, docs/performance.md); a class pays that once per student. The template imports them once per batch, then
forks each child from itself: the child runs the module as `python -m` would (`runpy`, `__name__ == "__main__"`,
its arguments in `sys.argv`) in a fresh copy of the template's memory, which holds nothing but imported modules
(no assignment, no case, no student's anything; the template never initialises CUDA, so a forked child may).

    Template()                the batch's side: starts the template (`python -m grader.operations.child_template`)
    template.start(...)       a child forked for one command, its pid; `go(pid)`, `returncode(pid)`

The protocol is JSON lines: the batch writes `{"start": {...}}` and `{"go": pid}` on the template's stdin; the
template writes `{"started": pid}` (or `{"failed": why}`) and, as each child ends, `{"exited": pid, "code": n}` (a
negative code: the signal that ended it, as subprocess says). The template is single-threaded (a child is forked
from a process with no other thread): it waits on its stdin and on a pipe that SIGCHLD writes to.

A child leads a session of its own (the batch signals its whole process group), writes its output to its log, reads
"go" from its stdin when held, and knows the template as its parent: it ends when the template does (the template
ends when the batch does: its stdin closes, or PR_SET_PDEATHSIG on Linux)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

# What a grading child imports before it grades: importing them here makes each child's a no-op.
PRELOAD = ("torch", "triton", "triton.language", "pytest", "jinja2", "numpy", "grader.operations.executors",
           "grader.operations.grade", "grader.publishing.files", "grader.authoring.discovery", "grader.backends")
START_TIMEOUT_S = 120.0  # the template's imports, then one fork


class TemplateUnavailable(RuntimeError):
    """The template process is not running (it failed to start or died): start the child the usual way."""


def forkable(command: Sequence[str]) -> str | None:
    """Pure: the module a `python -m MODULE ...` command with this interpreter runs (None for any other command)."""
    if len(command) >= 3 and command[0] == sys.executable and command[1] == "-m":
        return command[2]
    return None


class Template:
    """The template process of one batch (`close()` ends it; its children notice and end too)."""

    def __init__(self, env: Mapping[str, str] | None = None, preload: Sequence[str] = PRELOAD) -> None:
        self._lock = threading.Lock()  # the codes and whether the template is gone (the reader thread writes them)
        self._sending = threading.Lock()  # one request at a time, and a start's reply with it
        self._started: queue.Queue[dict[str, Any]] = queue.Queue()
        self._codes: dict[int, int] = {}
        self._gone = False
        self.process = subprocess.Popen(
            [sys.executable, "-m", "grader.operations.child_template", "--parent", str(os.getpid()),
             *(f"--preload={name}" for name in preload)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(env) if env is not None else None)
        self._reader = threading.Thread(target=self._read, name="child-template", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        """The template's pid: every child it forked has it as its parent."""
        return self.process.pid

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            message = json.loads(line)
            if "exited" in message:
                with self._lock:
                    self._codes[int(message["exited"])] = int(message["code"])
            else:
                self._started.put(message)
        with self._lock:
            self._gone = True
        self._started.put({"failed": "the template process ended"})

    def _send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write((json.dumps(message) + "\n").encode())
            self.process.stdin.flush()
        except (OSError, ValueError) as exc:  # its pipe is broken or closed: it is gone
            raise TemplateUnavailable(f"the template process is gone ({exc})") from exc

    def start(self, command: Sequence[str], cwd: Path, env: Mapping[str, str], log: Path, held: bool) -> int:
        """Fork a child that runs `command` (a `python -m MODULE ARGS...` command: `forkable`) in `cwd` with `env`,
        its output in `log`, holding before it grades until `go(pid)` when `held`; its pid."""
        module = forkable(command)
        if module is None:
            raise TemplateUnavailable(f"not a `{sys.executable} -m MODULE` command: {list(command)[:3]}")
        with self._sending:
            if self._gone:
                raise TemplateUnavailable("the template process ended")
            self._send({"start": {"module": module, "argv": list(command[3:]), "cwd": str(cwd), "env": dict(env),
                                  "log": str(log), "held": held}})
            try:
                reply = self._started.get(timeout=START_TIMEOUT_S)
            except queue.Empty:
                raise TemplateUnavailable(f"the template forked no child within {START_TIMEOUT_S:g} s") from None
        if "started" not in reply:
            raise TemplateUnavailable(str(reply.get("failed", reply)))
        return int(reply["started"])

    def go(self, pid: int) -> None:
        """Let the held child `pid` grade (nothing if it, or the template, is gone)."""
        with self._sending, contextlib.suppress(TemplateUnavailable):
            self._send({"go": pid})

    def returncode(self, pid: int) -> int | None:
        """How the child `pid` ended, None while it runs. A child of a template that died ends with it (its code is
        then unknown: -SIGKILL once the process is gone)."""
        with self._lock:
            if pid in self._codes:
                return self._codes[pid]
            gone = self._gone
        if gone and not _exists(pid):
            return -signal.SIGKILL
        return None

    def close(self) -> None:
        """End the template: its stdin closes, it exits, and the children it forked, seeing their parent gone, end."""
        with contextlib.suppress(OSError, ValueError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=10)  # it reads to the end of the template's output, then stops
        if self.process.stdout is not None:
            self.process.stdout.close()


def _exists(pid: int) -> bool:
    """Is `pid` a process that still runs (a zombie, ended but not reaped by whoever adopted it, does not)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc: it exists


# ------------------------------------------------------------------------------------------- the template process


def _serve(parent: int, preload: Sequence[str]) -> int:
    """The template's loop: import `preload`, then fork a child per request and report how each ends."""
    _die_with(parent)
    for name in preload:
        with contextlib.suppress(ImportError):
            __import__(name)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the batch's to handle: it ends us by closing stdin
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")  # the protocol's; whatever else prints goes to stderr
    os.dup2(2, 1)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that SIGCHLD wakes the loop through the pipe
    requests = sys.stdin.fileno()
    held: dict[int, int] = {}  # pid -> the write end of its "go" pipe
    pending = b""
    while True:
        try:
            ready, _, _ = select.select([requests, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
        _reap(held, replies)
        if requests not in ready:
            continue
        chunk = os.read(requests, 1 << 16)
        if not chunk:  # the batch closed our stdin (or died): end; the children notice their parent gone
            return 0
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            message = json.loads(line)
            if "go" in message:
                _go(held, int(message["go"]))
            else:
                _reply(replies, _fork(message["start"], held))


def _reply(replies: IO[str], message: dict[str, Any]) -> None:
    replies.write(json.dumps(message) + "\n")
    replies.flush()


def _reap(held: dict[int, int], replies: IO[str]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in held:
            os.close(held.pop(pid))
        _reply(replies, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _go(held: dict[int, int], pid: int) -> None:
    fd = held.pop(pid, None)
    if fd is None:
        return
    with contextlib.suppress(OSError):  # it died meanwhile: the reaper reports it
        os.write(fd, b"go\n")
    os.close(fd)


def _fork(request: dict[str, Any], held: dict[int, int]) -> dict[str, Any]:
    go_r, go_w = os.pipe() if request["held"] else (-1, -1)
    try:
        pid = os.fork()
    except OSError as exc:
        for fd in (go_r, go_w):
            if fd >= 0:
                os.close(fd)
        return {"failed": f"fork: {exc}"}
    if pid == 0:
        code = 1
        try:
            code = _become_child(request, go_r)
        finally:
            os._exit(code)
    if go_r >= 0:
        os.close(go_r)
        held[pid] = go_w
    return {"started": pid}


def _become_child(request: dict[str, Any], go_r: int) -> int:
    """In the forked child: a session of its own, the request's stdio, folder and environment, then the module."""
    import runpy
    import traceback
    import warnings

    os.setsid()
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL if sig == signal.SIGCHLD else signal.default_int_handler)
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    stdin = go_r if go_r >= 0 else os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.closerange(3, 1 << 16)  # the template's pipes, other children's "go" pipes
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - the process's own stdio
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False, buffering=1)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False, buffering=1)  # noqa: SIM115
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [request["module"], *request["argv"]]
    try:
        with warnings.catch_warnings():  # the module was imported here already (PRELOAD): that is the point
            warnings.filterwarnings("ignore", message=".*found in sys.modules.*", category=RuntimeWarning)
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if not isinstance(exit_.code, int) and exit_.code is not None:
            print(exit_.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - as an interpreter would: the traceback in the log, exit status 1
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


def _die_with(parent: int) -> None:
    """End with the batch: SIGTERM when the parent dies (Linux), and stdin's EOF everywhere."""
    from grader.running.processes.confinement import die_with_parent

    if os.getppid() != parent:
        sys.exit(0)
    die_with_parent(signal.SIGTERM)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m grader.operations.child_template",
                                     description="fork grading children for `grader batch` (internal)")
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--preload", action="append", default=[])
    args = parser.parse_args(argv)
    return _serve(args.parent, args.preload)


if __name__ == "__main__":
    sys.exit(main())
