"""Where student code runs: a submission's sandbox for one grade, and the zygote that forks its workers.

A `Sandbox` is a folder (temporary files, the submission's Triton cache, one sub-folder and log per
worker) and a confinement applied to every process started in it:

- its own process group, resource limits (file size, core dumps, CPU seconds, processes; address space
  on the interpreter), a minimal environment, and death with the grader (PR_SET_PDEATHSIG);
- as root: its own PID, mount and network namespaces (`unshare`), with the course's secrets (the
  assignment specs and oracles, the reference solutions, the output folder, other students' files)
  hidden under empty tmpfs mounts, and the unprivileged user `nobody` (`setpriv`, no new privileges).

Workers are forked from the sandbox's zygote (grader.running.worker.zygote), which imported torch,
triton and the harness once; `spawn` is then a fork (milliseconds) instead of a Python start (4-6 s on
the H200). A worker that must run under a tool (compute-sanitizer) is started as a fresh process in
the same confinement. The grader holds every deadline: it kills a worker's process group itself, and
kills the whole sandbox (the zygote and everything it forked) when the zygote stops answering.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from grader.authoring.spec import REFERENCE_DIR, Assignment
from grader.backends import Backend
from grader.running import protocol
from grader.running.processes.confinement import (
    GRADER_PACKAGE,
    INTERPRETER_MEMORY_LIMIT_BYTES,
    TOKEN_VARIABLE,
    WORKER_CPU_LIMIT_S,
    WORKER_OUTPUT_LIMIT_BYTES,
    await_exit,
    base_environment,
    become_subreaper,
    confine,
    host_pid,
    kill_marked,
    marked_pids,
    namespace_members,
    namespaces_available,
    namespaces_wanted,
    sandbox_identity,
    sandbox_parent,
)
from grader.running.processes.gpu_memory import MemoryWatchdog, Watch, first_guard_fraction, worker_budget_bytes
from grader.running.processes.gpu_slot import lock_dir
from grader.running.processes.kept_caches import kept_cache_folders
from grader.running.processes.nvml import NvmlReader, nvml_reader
from grader.running.processes.shared_zygote import template_address
from grader.running.worker.zygote import receive_control, send_control

ZYGOTE_START_TIMEOUT_S = 120.0
ZYGOTE_REPLY_TIMEOUT_S = 10.0
MEMORY_FRACTION_VARIABLE = "GRADER_GPU_MEMORY_FRACTION"  # read by the worker's harness (the first guard)
SANDBOX_USER = "nobody"


class SandboxFailure(Exception):
    """The sandbox's zygote could not be started or stopped answering; `detail` says what happened."""

    def __init__(self, detail: str, output_tail: str = "") -> None:
        super().__init__(detail)
        self.detail = detail
        self.output_tail = output_tail


@dataclass(frozen=True)
class WorkerOptions:
    # The worker's Triton: the grade's backend's ("interpreter", "cuda"), or "aot" (compiles ahead of time for a
    # GPU without one: no interpreter). Triton picks it at import, so a zygote forks workers of one flavour only.
    backend: str
    import_timeout_s: float
    # When the grader runs as root (as on Gradescope): run student code as this unprivileged user, in
    # its own network namespace. None keeps the grader's user.
    sandbox_user: str | None = SANDBOX_USER
    # Folders the worker must not see (reference solutions, specs, output folders, other students'
    # submissions): an empty tmpfs is mounted over each inside the worker's own mount namespace
    # (namespaces_wanted: on unless $GRADER_NAMESPACES is "off").
    hidden_paths: tuple[str, ...] = ()
    # Run the worker under this tool (e.g. compute-sanitizer's memcheck: grader/running/cases/sanitizer.py), with
    # these extra environment variables. Such a worker is a fresh process, never forked from the zygote.
    tool: tuple[str, ...] = ()
    tool_environment: tuple[tuple[str, str], ...] = ()


# --------------------------------------------------------------------------- the sandbox


@dataclass(frozen=True)
class GpuBudget:
    """Each worker's share of the GPU's memory, enforced by the grader's watchdog (grader.running.processes.gpu_memory)
    and, first, by torch's per-process memory fraction inside the worker (cooperative: it can be undone)."""

    watchdog: MemoryWatchdog
    reader: NvmlReader
    budget_bytes: int
    total_bytes: int

    @property
    def fraction(self) -> float:
        return first_guard_fraction(self.budget_bytes, self.total_bytes)


class Sandbox:
    """One submission's confinement for one grade: its folder, its zygote, the workers forked from it."""

    def __init__(self, options: WorkerOptions, triton_cache: Path | None = None,
                 gpu_budget: GpuBudget | None = None, kept_caches: Path | None = None,
                 zygote_address: str | None = None) -> None:
        """`gpu_budget`: on CUDA, every worker started here is watched against it. `kept_caches`: `grader check`'s
        Triton caches, kept between checks (grader.running.processes.kept_caches; the sandbox user's own where the
        grader is root).
        `zygote_address`: fork from the batch's shared zygote there (grader.running.processes.shared_zygote: trusted
        code only, as the grader's user, no namespaces) instead of starting one."""
        self.options = options
        self.zygote_address = zygote_address
        self.gpu_budget = gpu_budget
        self.root = Path(tempfile.mkdtemp(prefix="grader-sandbox-", dir=sandbox_parent()))
        self.token = secrets.token_hex(8)
        self.identity = sandbox_identity(options.sandbox_user)
        kept = kept_cache_folders(kept_caches, self.identity) if kept_caches is not None else None
        self._kept_clean_cache = kept[1] if kept else None
        self.triton_cache = triton_cache or (kept[0] if kept else self.root / "triton-cache")
        self.triton_cache.mkdir(parents=True, exist_ok=True)
        (self.root / "tmp").mkdir()
        self._own([self.root, self.root / "tmp", self.triton_cache])
        self._clean_root: Path | None = None  # made at the first clean worker (clean_folder)
        self._zygote: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._zygote_pid: int | None = None  # as the grader sees it
        self._forked_zygote: int | None = None  # a zygote forked from the batch's template (not our child)
        self._namespace_inode: int | None = None
        self._lock = threading.Lock()
        self._ready: protocol.ZygoteReady | None = None
        self._failure: SandboxFailure | None = None
        self._workers = 0
        become_subreaper()

    @property
    def isolated(self) -> bool:
        return self.zygote_address is None and namespaces_available() and namespaces_wanted()

    def _own(self, paths: Sequence[Path]) -> None:
        if self.identity is not None:
            for path in paths:  # never through a link a sandbox planted
                os.chown(path, self.identity.uid, self.identity.gid, follow_symlinks=False)

    def worker_folder(self) -> Path:
        """A fresh folder for one worker (its temporary files, its log, its copy of the submission)."""
        self._workers += 1
        folder = self.root / f"w{self._workers}"
        (folder / "tmp").mkdir(parents=True)
        self._own([folder, folder / "tmp"])
        return folder

    def clean_folder(self) -> Path:
        """A fresh folder for a worker that runs none of the submission's Python (a kernel host: the timer, the kernel
        cases, the replays). It is not in the sandbox's folder, which the submission's worker owns and can write:
        it sits in the grader's parent folder, which no worker can list, under a random name no worker is told (a
        clean worker's environment, like its memory, is not readable by a worker of the same user: the zygote is not
        dumpable), with the clean workers' own Triton cache beside it. So nothing a sandbox process writes (a
        compiled kernel planted in a cache, a module planted on an import path, a file swapped mid-compile) reaches
        a process that measures."""
        if self._clean_root is None:
            root = sandbox_parent() / f"grader-clean-{secrets.token_hex(16)}"
            root.mkdir(mode=0o700)
            if self._kept_clean_cache is None:
                (root / "triton-cache").mkdir(mode=0o700)
                self._own([root, root / "triton-cache"])
            else:
                self._own([root])
            self._clean_root = root
        self._workers += 1
        folder = self._clean_root / f"w{self._workers}"
        (folder / "tmp").mkdir(parents=True)
        self._own([folder, folder / "tmp"])
        return folder

    @property
    def clean_cache(self) -> Path | None:
        """The Triton cache of this sandbox's clean workers (None before the first: clean_folder)."""
        if self._clean_root is None:
            return None
        return self._kept_clean_cache or self._clean_root / "triton-cache"

    def environment(self, folder: Path, backend: str,
                    extra: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
        """What a worker (or the zygote) in this sandbox runs with; a clean worker (its folder under clean_folder's)
        compiles into the clean workers' Triton cache."""
        env = base_environment(backend, folder)
        env[TOKEN_VARIABLE] = self.token
        env["TMPDIR"] = str(folder / "tmp")
        if backend == "cuda" and self.gpu_budget is not None:
            env[MEMORY_FRACTION_VARIABLE] = f"{self.gpu_budget.fraction:.6f}"
        clean = self._clean_root is not None and self._clean_root in folder.parents
        env["TRITON_CACHE_DIR"] = str(self.clean_cache if clean and self.clean_cache else self.triton_cache)
        env.update(dict(extra))
        return env

    def budget_environment(self, budget_bytes: int | None) -> tuple[tuple[str, str], ...]:
        """The environment a CUDA worker with a budget of its own starts with (torch's per-process fraction for it,
        the first guard); nothing where it has none or this sandbox holds no budget."""
        if budget_bytes is None or self.gpu_budget is None or self.options.backend != "cuda":
            return ()
        return ((MEMORY_FRACTION_VARIABLE, f"{first_guard_fraction(budget_bytes, self.gpu_budget.total_bytes):.6f}"),)

    def command(self, program: Sequence[str]) -> list[str]:
        """`program` wrapped in the sandbox's namespaces and user (when isolated)."""
        if not self.isolated:
            return list(program)
        drop = []
        if self.identity is not None:
            drop = ["setpriv", f"--reuid={self.identity.uid}", f"--regid={self.identity.gid}", "--clear-groups",
                    "--no-new-privs", "--"]
        # Inside the new namespaces: hide folders under empty tmpfs mounts, then exec the program.
        script = ('IFS=:; for d in $GRADER_HIDE; do [ -d "$d" ] && mount -t tmpfs -o size=1m,mode=0555 tmpfs "$d"; '
                  'done; unset GRADER_HIDE; exec "$@"')
        return ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--net", "--",
                "sh", "-c", script, "sh", *drop, *program]

    def hidden(self) -> str:
        """The hidden folders, minus any that would hide what the sandbox itself needs. The GPU's lock files are
        hidden from every sandbox: a worker holding one (flock needs only a read) would stall every grade's timing."""
        needed = [self.root, self.triton_cache, GRADER_PACKAGE, Path(sys.prefix),
                  Path(sys.base_prefix), Path(sys.executable).resolve().parent]
        keep = []
        for raw in (*self.options.hidden_paths, *_gpu_locks()):
            path = Path(raw).resolve()
            if any(path == n or path in n.parents for n in needed):
                continue
            keep.append(str(path))
        return ":".join(keep)

    def popen(self, program: Sequence[str], env: dict[str, str], cwd: Path, log: Path,
              pass_fds: Sequence[int]) -> subprocess.Popen[bytes]:
        """Start `program` as a fresh process in this sandbox (its own process group, confined)."""
        isolated = self.isolated
        env = dict(env)
        if isolated:
            env["GRADER_HIDE"] = self.hidden()
        handle = open(log, "ab")  # noqa: SIM115 - handed to the child
        try:
            return subprocess.Popen(
                self.command(program), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=handle, stderr=handle,
                pass_fds=tuple(pass_fds), start_new_session=True,
                preexec_fn=lambda: confine(self.options.backend, self.identity, isolated),  # noqa: PLW1509
            )
        finally:
            handle.close()

    # ------------------------------------------------------------------ the zygote

    def start(self) -> None:
        """Start the zygote (it imports torch and triton in the background); `ready` waits for it. Call it
        from a thread that lives as long as the grade: the zygote dies with the thread that started it."""
        if self._zygote is not None or self._control is not None:
            return
        if self.zygote_address is not None:  # the batch's shared zygote: connect (it answers once it preloaded)
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                connection.connect(self.zygote_address)
            except OSError as exc:
                connection.close()
                self._failure = SandboxFailure(f"the batch's shared zygote could not be reached ({exc})")
                return
            self._control = connection
            return
        template = template_address(self.options.backend) if self.isolated else None
        if template is not None and self._start_from_template(template):
            return
        grader_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            env = self.environment(self.root, self.options.backend)
            self._zygote = self.popen([sys.executable, "-m", "grader.running.worker.zygote", str(zygote_end.fileno())],
                                      env, self.root, self.root / "zygote.log", (zygote_end.fileno(),))
        finally:
            zygote_end.close()
        self._control = grader_end

    def _start_from_template(self, address: str) -> bool:
        """The zygote forked from the batch's zygote template (grader.running.worker.zygote_template) and confined
        there as `command` would confine a fresh one; False (nothing started) where that did not work."""
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        identity = self.identity
        request = protocol.StartZygote(
            backend=self.options.backend, env=self.environment(self.root, self.options.backend), cwd=str(self.root),
            log=str(self.root / "zygote.log"), hide=tuple(p for p in self.hidden().split(":") if p),
            uid=identity.uid if identity else None, gid=identity.gid if identity else None,
            file_limit=WORKER_OUTPUT_LIMIT_BYTES, cpu_limit_s=WORKER_CPU_LIMIT_S,
            address_limit=INTERPRETER_MEMORY_LIMIT_BYTES if self.options.backend == "interpreter" else None)
        try:
            connection.connect(address)
            send_control(connection, protocol.encode(request))
            tree, fds = receive_control(connection, ZYGOTE_REPLY_TIMEOUT_S)
            for fd in fds:
                os.close(fd)
            started = protocol.decode_answer(request, tree)
        except (TimeoutError, EOFError, OSError, ValueError):
            connection.close()
            return False
        if not started.ok or started.pid <= 0:
            connection.close()
            return False
        self._control, self._forked_zygote = connection, started.pid
        return True

    def ready(self) -> protocol.ZygoteReady:
        """The zygote's ready message (waits for it once); SandboxFailure if it did not come up."""
        with self._lock:
            if self._failure is not None:
                raise self._failure
            if self._ready is not None:
                return self._ready
            self.start()
            if self._failure is not None:
                raise self._failure
            assert self._control is not None
            try:
                tree, fds = receive_control(self._control, ZYGOTE_START_TIMEOUT_S)
                for fd in fds:
                    os.close(fd)
                message = protocol.decode_reply(protocol.ZygoteReady, tree)
            except (TimeoutError, EOFError, OSError, ValueError) as exc:
                self._failure = SandboxFailure(f"the sandbox did not start ({exc})", self.log_tail())
                self._stop_zygote()
                raise self._failure from None
            if message.cuda_initialized:
                self._failure = SandboxFailure("the sandbox's zygote initialised CUDA: it cannot fork workers")
                self._stop_zygote()
                raise self._failure
            if self._forked_zygote is not None:  # forked from the batch's template: its pid as the template told
                self._zygote_pid = self._forked_zygote
            else:  # the shared zygote is in no namespace of its own: the pid it tells is the grader's view
                self._zygote_pid = self._find_zygote() if self._zygote is not None else message.pid
            if self._zygote_pid is not None and self.isolated:
                self._namespace_inode = os.stat(f"/proc/{self._zygote_pid}/ns/pid").st_ino
            self._ready = message
            return message

    def _find_zygote(self) -> int | None:
        """The zygote's pid as the grader sees it: the Popen itself, or unshare's child when isolated."""
        assert self._zygote is not None
        if not self.isolated:
            return self._zygote.pid
        for _ in range(100):
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                try:
                    with open(f"/proc/{entry.name}/stat", "rb") as f:
                        fields = f.read().rsplit(b")", 1)[-1].split()
                except OSError:
                    continue
                if len(fields) > 1 and int(fields[1]) == self._zygote.pid:
                    return int(entry.name)
            time.sleep(0.01)
        return None

    def _ask(self, request: protocol.Request[protocol.R], fds: Sequence[int] = ()) -> protocol.R:
        """The zygote's reply to `request`; SandboxFailure (and the sandbox stopped) when it does not answer, or
        answers with something that is not the request's reply."""
        self.ready()
        with self._lock:
            if self._control is None:
                raise SandboxFailure("the sandbox was closed")
            try:
                send_control(self._control, protocol.encode(request), fds)
                tree, extra = receive_control(self._control, ZYGOTE_REPLY_TIMEOUT_S)
                for fd in extra:
                    os.close(fd)
                reply = protocol.decode_answer(request, tree)
            except (TimeoutError, EOFError, OSError, ValueError) as exc:
                self._failure = SandboxFailure(f"the sandbox's zygote stopped answering ({exc})", self.log_tail())
                self._stop_zygote()
                raise self._failure from None
        return reply

    def fork(self, folder: Path, backend: str, fds: Sequence[int],
             extra: tuple[tuple[str, str], ...] = ()) -> tuple[int, int]:
        """Fork a worker with its channel `fds` (read, write, progress marks): its pid as the grader sees it,
        and as the zygote sees it (they differ inside a PID namespace). `extra`: its environment's additions."""
        if (backend == "interpreter") != (self.options.backend == "interpreter"):
            # Triton decorates its own library functions when it is imported: for the interpreter or not.
            raise SandboxFailure(f"a {self.options.backend} sandbox cannot fork a {backend} worker")
        limit = INTERPRETER_MEMORY_LIMIT_BYTES if backend == "interpreter" else None
        reply = self._ask(protocol.Fork(backend=backend, env=self.environment(folder, backend, extra), cwd=str(folder),
                                        log=str(folder / "output.log"), address_limit=limit), fds)
        if not reply.ok:
            raise SandboxFailure(f"the sandbox's zygote could not fork a worker: {reply.failure.message}")
        pid = reply.pid
        if self._namespace_inode is None:
            return pid, pid
        found = host_pid(pid, self._namespace_inode)
        if found is None:
            raise SandboxFailure(f"the forked worker (pid {pid} in the sandbox) could not be found")
        return found, pid

    def exit_status(self, namespace_pid: int, wait_s: float = 2.0) -> int | None:
        """A forked worker's exit status (subprocess style), once the zygote reaped it; None if unknown."""
        if self._control is None or self._failure is not None:
            return None
        deadline = time.monotonic() + wait_s
        while True:
            try:
                reply = self._ask(protocol.Status(pid=namespace_pid))
            except SandboxFailure:
                return None
            if reply.exited:
                return reply.status
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)

    def own_processes(self) -> list[int]:
        """Every process of this sandbox: those carrying its token and, where it has a PID namespace, every process
        in it (a zygote forked from the batch's template, and what it forks, show the template's environment)."""
        found = set(marked_pids(self.token))
        if self._namespace_inode is not None:
            found.update(namespace_members(self._namespace_inode))
        return sorted(found)

    def watch(self, pid: int, label: str, budget_bytes: int | None = None) -> Watch | None:
        """Watch a CUDA worker's GPU memory against this sandbox's budget, or `budget_bytes` where the worker has one of
        its own (None: no budget here)."""
        if self.gpu_budget is None or self.options.backend != "cuda":
            return None
        try:
            return self.gpu_budget.watchdog.watch(pid, budget_bytes or self.gpu_budget.budget_bytes, label)
        except (ValueError, OSError):  # the worker is already gone
            return None

    def unwatch(self, watch: Watch | None) -> None:
        if watch is not None and self.gpu_budget is not None:
            self.gpu_budget.watchdog.unwatch(watch)

    def kill_strays(self) -> None:
        """Kill processes that escaped a worker's process group (daemons): they were re-parented to the zygote."""
        if self._control is not None and self._failure is None:
            try:
                self._ask(protocol.KillStrays())
            except SandboxFailure:
                pass

    def log_tail(self, chars: int = 3000) -> str:
        try:
            with open(self.root / "zygote.log", "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - chars))
                return f.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def _stop_zygote(self) -> None:
        if self._control is not None:
            try:
                self._control.close()
            except OSError:
                pass
            self._control = None
        if self._zygote is not None:
            try:
                os.killpg(self._zygote.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self._zygote.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self._forked_zygote is not None:  # PID 1 of its namespace: every process in it dies with it
            try:
                os.kill(self._forked_zygote, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            await_exit(self._forked_zygote)
        kill_marked(self.token)  # the zygote's workers and their daemons (all carry its token)

    def close(self) -> None:
        with self._lock:
            self._failure = self._failure or SandboxFailure("the sandbox was closed")
            self._stop_zygote()
            self._zygote = None
        shutil.rmtree(self.root, ignore_errors=True)
        if self._clean_root is not None:
            shutil.rmtree(self._clean_root, ignore_errors=True)


def _gpu_locks() -> tuple[str, ...]:
    """The GPU's lock folder (made now, so that no worker can make it first), or nothing where it cannot be made: then
    no grade can lock there either."""
    try:
        return (str(lock_dir()),)
    except OSError:
        return ()


# --------------------------------------------------------------------------- a submission's sandbox


def sandbox_options(assignment: Assignment, submission: Path, backend: Backend | str,
                    hidden: tuple[str, ...] = ()) -> WorkerOptions:
    """How a submission's sandbox confines its workers on `backend`."""
    return WorkerOptions(backend=str(backend), import_timeout_s=assignment.import_timeout_s,
                         hidden_paths=hidden_from_worker(assignment, submission) + tuple(hidden))


def hidden_from_worker(assignment: Assignment, submission: Path) -> tuple[str, ...]:
    """Folders student code has no business reading: the course's assignments/ (hidden cases, oracles)
    and reference/ (reference solutions, mutant corpora), whether or not this assignment has one, and the
    folder the submission came from (other students' files)."""
    paths = [assignment.root.parent, assignment.course_root / REFERENCE_DIR, Path(submission).resolve().parent]
    return tuple(str(p) for p in paths)


def start_sandbox(assignment: Assignment, submission: Path, backend: Backend, hidden: tuple[str, ...] = (),
                  concurrent_grades: int = 1, kept_caches: Path | None = None) -> Sandbox:
    """A submission's sandbox for one grade, its zygote started (it imports torch and triton in the
    background). Call it from the thread that lives as long as the grade. `kept_caches`: Sandbox's."""
    backend = Backend(backend)  # a name is taken too
    sandbox = Sandbox(sandbox_options(assignment, Path(submission).resolve(), backend, hidden),
                      gpu_budget=gpu_budget(backend, concurrent_grades), kept_caches=kept_caches)
    sandbox.start()
    return sandbox


def gpu_budget(backend: Backend, concurrent_grades: int) -> GpuBudget | None:
    """On CUDA with NVML: each worker's share of GPU memory (a grade runs two at a time: its worker and the
    replayer or timer), held by a watchdog thread in this process. None without NVML (then only torch's
    per-process fraction is not set either, and a worker may take what the GPU has)."""
    if not backend.on_gpu:
        return None
    reader = nvml_reader()
    if reader is None:
        return None
    total = reader.total_bytes()
    # A budget is a cap, not a reservation: workers seldom come near theirs, and the timing phases' tensors are
    # bounded apart (gpu_seats). Budgets less the timing share left the timer 2.8 GiB at six grades on an H100 80GB:
    # too little for fused_layers' four cases kept at once (docs/gpu-runs-2026-12-06.txt).
    budget = worker_budget_bytes(total, max(1, concurrent_grades), workers_per_grade=2)
    return GpuBudget(MemoryWatchdog(reader), reader, budget, total)
