"""The grader's side of the worker: start it, talk to it with deadlines, replace it when it dies.

A worker that hangs past its deadline, exits, crashes or hits a fatal CUDA error is killed with its
whole process group; the next request starts a fresh one and re-imports the submission, so only the
affected case fails.
"""

from __future__ import annotations

import functools
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader import trap_ids
from grader.running.worker.protocol import ChannelClosed, ChannelTimeout, receive, send

OUTPUT_TAIL_BYTES = 4000
WORKER_OUTPUT_LIMIT_BYTES = 64 << 20
WORKER_START_TIMEOUT_S = 120.0


class WorkerFailure(Exception):
    """The worker did not answer: `kind` is trap_ids.TIMEOUT or trap_ids.CRASH.

    A plain exception, not a frozen dataclass: Python 3.12's contextlib assigns `__traceback__` to an
    exception leaving a `@contextmanager` block, which a frozen dataclass refuses (on the H200 a crash at
    import became "grader internal error: FrozenInstanceError")."""

    def __init__(self, kind: str, detail: str, output_tail: str = "") -> None:
        super().__init__(kind, detail, output_tail)
        self.kind = kind
        self.detail = detail
        self.output_tail = output_tail

    def __str__(self) -> str:
        return self.detail


# Address-space limit for interpreter workers (CUDA needs a huge virtual address space: none there).
INTERPRETER_MEMORY_LIMIT_BYTES = 8 << 30
WORKER_CPU_LIMIT_S = 1800
WORKER_MAX_PROCESSES = 512
# Variables the worker inherits from the grader; everything else (tokens, credentials) stays behind.
_PASSED_ENVIRONMENT = (
    "PATH", "LANG", "LC_ALL", "VIRTUAL_ENV",
    "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH",
    "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH", "TRITON_F32_DEFAULT", "TRITON_DEFAULT_FP_FUSION",
    "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
)
SANDBOX_USER = "nobody"
_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class WorkerOptions:
    backend: str  # "interpreter", "cuda" or "aot" (ahead-of-time compile, no interpreter)
    import_timeout_s: float
    # When the grader runs as root (as on Gradescope): run student code as this unprivileged user, in
    # its own network namespace. None keeps the grader's user.
    sandbox_user: str | None = SANDBOX_USER
    # Folders the worker must not see (reference solutions, specs, output folders, other students'
    # submissions): an empty tmpfs is mounted over each inside the worker's own mount namespace
    # (namespaces_wanted: on unless $GRADER_NAMESPACES is "off").
    hidden_paths: tuple[str, ...] = ()
    # Run the worker under this tool (e.g. compute-sanitizer's memcheck: grader/running/sanitizer.py), with
    # these extra environment variables.
    tool: tuple[str, ...] = ()
    tool_environment: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class _Identity:
    uid: int
    gid: int


def _sandbox_identity(options: WorkerOptions) -> _Identity | None:
    if options.sandbox_user is None or os.geteuid() != 0:
        return None
    return _usable_identity(options.sandbox_user)


@functools.lru_cache(maxsize=4)
def _usable_identity(user: str) -> _Identity | None:
    """The user's ids, if that user can run this Python with torch, triton and the worker (a venv
    under /root, say, is not reachable for it: then workers keep the grader's user)."""
    import pwd

    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None
    identity = _Identity(entry.pw_uid, entry.pw_gid)
    package_root = str(Path(__file__).resolve().parents[2])

    def drop() -> None:
        os.setgroups([])
        os.setgid(identity.gid)
        os.setuid(identity.uid)

    try:
        probe = subprocess.run(
            [sys.executable, "-c", "import torch, triton, grader.running.worker.harness"],
            env={"PYTHONPATH": package_root, "PATH": os.environ.get("PATH", ""), "HOME": "/"},
            cwd="/", preexec_fn=drop, capture_output=True, timeout=120, check=False,  # noqa: PLW1509
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return identity if probe.returncode == 0 else None


def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _confine(options: WorkerOptions, identity: _Identity | None, isolated: bool) -> None:  # child, pre-exec
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # oversized writes fail instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (WORKER_OUTPUT_LIMIT_BYTES, WORKER_OUTPUT_LIMIT_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (WORKER_CPU_LIMIT_S, WORKER_CPU_LIMIT_S))
    if options.backend == "interpreter":
        memory = INTERPRETER_MEMORY_LIMIT_BYTES
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    libc = _libc()
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # the worker dies with the grader
    if isolated:
        return  # namespaces and the user drop are done by `unshare` and `setpriv` in the command
    if identity is not None:
        libc.unshare(_CLONE_NEWNET)  # no network at all (best effort: needs root, which we have here)
        resource.setrlimit(resource.RLIMIT_NPROC, (WORKER_MAX_PROCESSES, WORKER_MAX_PROCESSES))
        os.setgroups([])
        os.setgid(identity.gid)
        os.setuid(identity.uid)


class Worker:
    """One submission's worker process, restarted on demand."""

    def __init__(self, submission: Path, names: list[str], options: WorkerOptions,
                 triton_cache: Path | None = None) -> None:
        """`triton_cache`: a Triton cache folder this worker shares with the other workers of the same
        submission (one student's kernels compiled once per grade); by default one of its own."""
        self.submission = Path(submission)
        self.names = names
        self.options = options
        self.sandbox = Path(tempfile.mkdtemp(prefix="grader-sandbox-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.to_worker = -1
        self.from_worker = -1
        self.sandboxed_path = self.sandbox / self.submission.name
        self.token = secrets.token_hex(8)
        self.identity = _sandbox_identity(options)
        for sub in ("tmp", "triton-cache"):
            (self.sandbox / sub).mkdir()
        self.triton_cache = triton_cache or self.sandbox / "triton-cache"
        self.triton_cache.mkdir(parents=True, exist_ok=True)
        if self.identity is not None:
            for path in (self.sandbox, self.sandbox / "tmp", self.triton_cache):
                os.chown(path, self.identity.uid, self.identity.gid)
        _become_subreaper()

    # ------------------------------------------------------------------ life cycle

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in _PASSED_ENVIRONMENT}
        env["GRADER_WORKER_TOKEN"] = self.token
        env["TMPDIR"] = str(self.sandbox / "tmp")
        if self.options.backend == "interpreter":
            env["TRITON_INTERPRET"] = "1"
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = package_root
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONNOUSERSITE"] = "1"
        env["TRITON_CACHE_DIR"] = str(self.triton_cache)
        env["HOME"] = str(self.sandbox)
        env.update(dict(self.options.tool_environment))
        return env

    def _command(self, read_fd: int, write_fd: int) -> list[str]:
        worker = [*self.options.tool, sys.executable, "-m", "grader.running.worker", self.options.backend, str(read_fd),
                  str(write_fd)]
        if not self.isolated:
            return worker
        drop = []
        if self.identity is not None:
            drop = ["setpriv", f"--reuid={self.identity.uid}", f"--regid={self.identity.gid}", "--clear-groups",
                    "--no-new-privs", "--"]
        # Inside the new namespaces: hide folders under empty tmpfs mounts, then exec the worker.
        script = ('IFS=:; for d in $GRADER_HIDE; do [ -d "$d" ] && mount -t tmpfs -o size=1m,mode=0555 tmpfs "$d"; '
                  'done; unset GRADER_HIDE; exec "$@"')
        return ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--net", "--",
                "sh", "-c", script, "sh", *drop, *worker]

    @property
    def isolated(self) -> bool:
        return _namespaces_available() and namespaces_wanted()

    def _hidden(self) -> str:
        """The hidden folders, minus any that would hide what the worker itself needs."""
        needed = [self.sandbox, self.triton_cache, Path(__file__).resolve().parents[1], Path(sys.prefix),
                  Path(sys.base_prefix), Path(sys.executable).resolve().parent]
        keep = []
        for raw in self.options.hidden_paths:
            path = Path(raw).resolve()
            if any(path == n or path in n.parents for n in needed):
                continue
            keep.append(str(path))
        return ":".join(keep)

    def start(self) -> dict[str, Any]:
        """Start a worker and import the submission; return the worker's load reply."""
        self.spawn()
        return self.finish_start()

    def spawn(self) -> None:
        """Start the worker process. Call it from the thread that lives as long as the grade (the
        main thread): the worker is killed when the thread that spawned it ends (PR_SET_PDEATHSIG).
        `finish_start` may then wait for it on any thread."""
        self.stop()
        shutil.copyfile(self.submission, self.sandboxed_path)
        if self.identity is not None:
            os.chown(self.sandboxed_path, self.identity.uid, self.identity.gid)
        g2w_read, g2w_write = os.pipe()
        w2g_read, w2g_write = os.pipe()
        log = open(self.sandbox / "output.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            env = self._environment()
            isolated = self.isolated
            if isolated:
                env["GRADER_HIDE"] = self._hidden()
            self.process = subprocess.Popen(
                self._command(g2w_read, w2g_write),
                cwd=self.sandbox,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=(g2w_read, w2g_write),
                start_new_session=True,
                preexec_fn=lambda: _confine(self.options, self.identity, isolated),  # noqa: PLW1509
            )
        finally:
            log.close()
            os.close(g2w_read)
            os.close(w2g_write)
        self.to_worker, self.from_worker = g2w_write, w2g_read

    def finish_start(self) -> dict[str, Any]:
        """Wait for the spawned worker to come up, then import the submission: the load reply."""
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
        _kill_marked(self.token)  # children that left the process group (setsid, double fork)
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

    def output_size(self) -> int:
        try:
            return (self.sandbox / "output.log").stat().st_size
        except OSError:
            return 0

    def output_since(self, offset: int, limit: int = 1 << 20) -> str:
        """What the worker printed since `output_size()` returned `offset` (at most `limit` bytes)."""
        try:
            with open(self.sandbox / "output.log", "rb") as f:
                f.seek(offset)
                return f.read(limit).decode("utf-8", "replace")
        except OSError:
            return ""

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
            raise WorkerFailure(trap_ids.TIMEOUT, f"no answer after {timeout:g} s while {what}", tail) from None
        except (ChannelClosed, OSError, EOFError, RuntimeError, ValueError) as exc:
            code = self._exit_code()
            tail = self.output_tail()
            self.stop()
            raise WorkerFailure(trap_ids.CRASH, f"the worker died while {what} ({describe_exit(code)})", tail) from exc
        if not isinstance(reply, dict):
            self.stop()
            raise WorkerFailure(trap_ids.CRASH, f"the worker sent a malformed reply while {what}")
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
            raise WorkerFailure(trap_ids.CRASH, "the worker is not running")
        try:
            send(self.to_worker, message)
        except OSError:
            code = self._exit_code()
            self.stop()
            raise WorkerFailure(trap_ids.CRASH, f"the worker died before {what} ({describe_exit(code)})") from None
        started = time.monotonic()
        reply = self._receive(timeout, what)
        reply["elapsed_s"] = time.monotonic() - started
        if reply.get("fatal"):
            self.stop()
        return reply


def namespaces_wanted() -> bool:
    """Run the worker in its own PID, mount and network namespaces when the grader is root (Linux
    `unshare`): it cannot see or signal the grader, reach the network, read /proc of other processes,
    or leave a daemon behind (all die with the namespace). $GRADER_NAMESPACES ("on"/"off"), else on
    (verified on the H200: CUDA works inside them)."""
    setting = os.environ.get("GRADER_NAMESPACES", "auto").strip().lower()
    if setting in ("on", "1", "yes"):
        return True
    return setting not in ("off", "0", "no")


@functools.lru_cache(maxsize=1)
def _namespaces_available() -> bool:
    """Root, Linux, and `unshare` can create PID/mount/network namespaces here (probed once)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    try:
        probe = subprocess.run(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--net", "--", "true"],
                               capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def _become_subreaper() -> None:
    """Orphaned descendants of a worker (daemons) are re-parented to the grader, not to init, so the
    grader can find and kill them (Linux only; harmless elsewhere)."""
    try:
        _libc().prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _kill_marked(token: str) -> None:
    """Kill every process whose environment carries this worker's token (escaped daemons included)."""
    marker = f"GRADER_WORKER_TOKEN={token}".encode()
    for _ in range(3):
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    environ = f.read()
            except OSError:
                continue
            if marker in environ.split(b"\0"):
                found.append(int(entry.name))
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except OSError:
                    pass
        if not found:
            return
        time.sleep(0.05)
        for pid in found:  # reap the ones re-parented to us (only those: other children are not ours to reap)
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def describe_exit(code: int | None) -> str:
    """A process's exit status in words: `exit code 3`, `signal SIGKILL`, or `no exit status`."""
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
