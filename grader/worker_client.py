"""The grader's side of the worker: start it, talk to it with deadlines, replace it when it dies.

A worker that hangs past its deadline, exits, crashes or hits a fatal CUDA error is killed with its
whole process group; the next request starts a fresh one and re-imports the submission, so only the
affected case fails.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.worker.protocol import ChannelClosed, ChannelTimeout, receive, send

OUTPUT_TAIL_BYTES = 4000
WORKER_OUTPUT_LIMIT_BYTES = 64 << 20
WORKER_START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class WorkerFailure(Exception):
    """The worker did not answer: `kind` is "timeout" or "crash"."""

    kind: str
    detail: str
    output_tail: str = ""

    def __str__(self) -> str:
        return self.detail


@dataclass(frozen=True)
class WorkerOptions:
    backend: str  # "interpreter" or "cuda"
    import_timeout_s: float
    cuda_device: str | None = None
    memory_limit_bytes: int | None = None


def _limit_resources(options: WorkerOptions) -> None:  # runs in the child before exec
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # oversized writes fail instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (WORKER_OUTPUT_LIMIT_BYTES, WORKER_OUTPUT_LIMIT_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if options.memory_limit_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (options.memory_limit_bytes, options.memory_limit_bytes))


class Worker:
    """One submission's worker process, restarted on demand."""

    def __init__(self, submission: Path, names: list[str], options: WorkerOptions) -> None:
        self.submission = Path(submission)
        self.names = names
        self.options = options
        self.sandbox = Path(tempfile.mkdtemp(prefix="grader-sandbox-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.to_worker = -1
        self.from_worker = -1
        self.restarts = 0
        self.sandboxed_path = self.sandbox / self.submission.name

    # ------------------------------------------------------------------ life cycle

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("TRITON_INTERPRET", None)
        if self.options.backend == "interpreter":
            env["TRITON_INTERPRET"] = "1"
        if self.options.cuda_device is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.options.cuda_device
        package_root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        env.setdefault("TRITON_CACHE_DIR", str(Path(tempfile.gettempdir()) / "grader-triton-cache"))
        env["HOME"] = str(self.sandbox)
        return env

    def start(self) -> dict[str, Any]:
        """Start a worker and import the submission; return the worker's load reply."""
        self.stop()
        shutil.copyfile(self.submission, self.sandboxed_path)
        g2w_read, g2w_write = os.pipe()
        w2g_read, w2g_write = os.pipe()
        log = open(self.sandbox / "output.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "grader.worker", self.options.backend, str(g2w_read), str(w2g_write)],
                cwd=self.sandbox,
                env=self._environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=(g2w_read, w2g_write),
                start_new_session=True,
                preexec_fn=lambda: _limit_resources(self.options),  # noqa: PLW1509
            )
        finally:
            log.close()
            os.close(g2w_read)
            os.close(w2g_write)
        self.to_worker, self.from_worker = g2w_write, w2g_read
        self._receive(WORKER_START_TIMEOUT_S, "starting the worker (importing torch and triton)")
        return self.request(
            {"op": "load", "path": str(self.sandboxed_path), "names": self.names},
            self.options.import_timeout_s,
            what=f"importing {self.submission.name}",
        )

    def stop(self) -> None:
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self.process = None
        for fd in (self.to_worker, self.from_worker):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.to_worker = self.from_worker = -1

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.sandbox, ignore_errors=True)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    # ------------------------------------------------------------------ talking

    def output_tail(self) -> str:
        path = self.sandbox / "output.log"
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - OUTPUT_TAIL_BYTES))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _receive(self, timeout: float, what: str) -> dict[str, Any]:
        try:
            reply = receive(self.from_worker, timeout)
        except ChannelTimeout:
            tail = self.output_tail()
            self.stop()
            raise WorkerFailure("timeout", f"no answer after {timeout:g} s while {what}", tail) from None
        except (ChannelClosed, OSError, EOFError, RuntimeError, ValueError) as exc:
            code = self._exit_code()
            tail = self.output_tail()
            self.stop()
            raise WorkerFailure("crash", f"the worker died while {what} ({_describe_exit(code)})", tail) from exc
        if not isinstance(reply, dict):
            self.stop()
            raise WorkerFailure("crash", f"the worker sent a malformed reply while {what}")
        return reply

    def _exit_code(self) -> int | None:
        if self.process is None:
            return None
        try:
            return self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None

    def request(self, message: dict[str, Any], timeout: float, what: str) -> dict[str, Any]:
        if not self.alive:
            raise WorkerFailure("crash", "the worker is not running")
        try:
            send(self.to_worker, message)
        except OSError:
            code = self._exit_code()
            self.stop()
            raise WorkerFailure("crash", f"the worker died before {what} ({_describe_exit(code)})") from None
        started = time.monotonic()
        reply = self._receive(timeout, what)
        reply["elapsed_s"] = time.monotonic() - started
        if reply.get("fatal"):
            self.stop()
        return reply


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "it did not exit"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exit code {code}"
