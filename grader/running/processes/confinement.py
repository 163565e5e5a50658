"""How a sandbox confines the processes it starts (grader.running.processes.sandbox): who they run as (the user
`nobody` where the grader is root and that user can reach this Python), whether PID, mount and network
namespaces are there, the resource limits each process gets before it runs anything, and finding and killing what
a sandbox left behind (every process carries its sandbox's token)."""

from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.running.processes.cpu_threads import THREAD_VARIABLES, thread_environment

WORKER_OUTPUT_LIMIT_BYTES = 64 << 20
# Address-space limit for interpreter workers (CUDA needs a huge virtual address space: none there).
INTERPRETER_MEMORY_LIMIT_BYTES = 8 << 30
WORKER_CPU_LIMIT_S = 1800
WORKER_MAX_PROCESSES = 512
TOKEN_VARIABLE = "GRADER_WORKER_TOKEN"  # every process of a sandbox carries its token in its environment
GRADER_PACKAGE = Path(__file__).resolve().parents[2]  # grader/ (this file is grader/running/processes/...)
PROJECT_ROOT = GRADER_PACKAGE.parent  # what a worker's PYTHONPATH names, so it imports this grader
_CLONE_NEWNET = 0x40000000
# Variables the worker inherits from the grader; everything else (tokens, credentials) stays behind.
PASSED_ENVIRONMENT = (
    "PATH", "LANG", "LC_ALL", "VIRTUAL_ENV",
    "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH",
    "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH", "TRITON_F32_DEFAULT", "TRITON_DEFAULT_FP_FUSION",
    "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
    *THREAD_VARIABLES,  # torch's and numpy's CPU threads: a batch's share per process, or the caller's own
)
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Identity:
    uid: int
    gid: int


_parent: Path | None = None


def sandbox_parent() -> Path:
    """The folder sandboxes are made in: the grader's user's, which others may pass through but not list (0711).
    Every sandbox runs as one user (nobody) and a sandbox's folder is its user's: in a listable folder (/tmp), a
    worker could find another submission's sandbox and write into it; here it knows only its own random name.
    A folder of that name that is not a real folder of the grader's user (planted) is passed over for a new one."""
    global _parent
    if _parent is not None:
        return _parent
    folder = Path(tempfile.gettempdir()) / f"grader-sandboxes-{os.geteuid()}"
    try:
        folder.mkdir(mode=0o711, exist_ok=True)
        found = os.lstat(folder)
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid():
            raise PermissionError(f"{folder} is not the grader's")
    except OSError:
        folder = Path(tempfile.mkdtemp(prefix="grader-sandboxes-"))
    os.chmod(folder, 0o711)  # mkdir's mode passes through the umask
    _parent = folder
    return folder


def sandbox_identity(user: str | None) -> Identity | None:
    """Who a sandbox's processes run as: `user` where the grader is root and that user can reach what a worker
    imports; None keeps the grader's user."""
    if user is None or os.geteuid() != 0:
        return None
    return usable_identity(user)


@functools.lru_cache(maxsize=4)
def usable_identity(user: str) -> Identity | None:
    """The user's ids, if that user can reach this Python, torch, triton and the grader (a venv under
    /root, say, is not reachable for it: then workers keep the grader's user). Read from the permission
    bits of every folder on the way (no process started); a zygote that still fails to start as that
    user is retried with the grader's user (Sandbox.start)."""
    import pwd

    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None
    import importlib.util

    needed = [Path(sys.executable).resolve(), PROJECT_ROOT]
    for name in ("torch", "triton", "numpy"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            needed.append(Path(spec.origin).resolve().parent)
    return Identity(entry.pw_uid, entry.pw_gid) if all(_reachable_by_others(p) for p in needed) else None


def _reachable_by_others(path: Path) -> bool:
    """Every folder above `path` is searchable by other users and `path` itself is readable by them."""
    try:
        mode = path.stat().st_mode
        if not mode & 0o004:
            return False
        for parent in path.parents:
            if not parent.stat().st_mode & 0o001:
                return False
    except OSError:
        return False
    return True


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
def namespaces_available() -> bool:
    """Root, Linux, and `unshare` can create PID/mount/network namespaces here (probed once)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    try:
        probe = subprocess.run(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--net", "--", "true"],
                               capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """`sig` to this process when the thread that forked it ends (PR_SET_PDEATHSIG; nothing off Linux). Safe in a
    child before exec: a sandbox, the batch's shared zygotes, a batch's children."""
    if sys.platform.startswith("linux"):
        try:
            _libc().prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        except (OSError, AttributeError):
            pass


def base_environment(backend: str, folder: Path) -> dict[str, str]:
    """What every process the grader starts for workers imports with, from the grader's own environment: the
    variables it passes (PASSED_ENVIRONMENT; the thread pools' sizes, one grade's share where none is set:
    grader.running.processes.cpu_threads), the grader's checkout first on the import path, no bytecode written, no
    user site, HOME and TMPDIR in `folder`, Triton's interpreter for the interpreter backend. No token: a sandbox
    adds its own (Sandbox.environment)."""
    env = {k: v for k, v in os.environ.items() if k in PASSED_ENVIRONMENT}
    env.update(thread_environment(1, env))  # where neither the caller nor a batch said: one grade's share
    env.update(PYTHONPATH=str(PROJECT_ROOT), PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", PYTHONNOUSERSITE="1",
               HOME=str(folder), TMPDIR=str(folder))
    if backend == "interpreter":
        env["TRITON_INTERPRET"] = "1"
    return env


def confine(backend: str, identity: Identity | None, isolated: bool) -> None:  # child, pre-exec
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # oversized writes fail instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (WORKER_OUTPUT_LIMIT_BYTES, WORKER_OUTPUT_LIMIT_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (WORKER_CPU_LIMIT_S, WORKER_CPU_LIMIT_S))
    if backend == "interpreter":
        memory = INTERPRETER_MEMORY_LIMIT_BYTES
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    libc = _libc()
    die_with_parent()  # the sandbox dies with the grader
    if isolated:
        return  # namespaces and the user drop are done by `unshare` and `setpriv` in the command
    if identity is not None:
        libc.unshare(_CLONE_NEWNET)  # no network at all (best effort: needs root, which we have here)
        resource.setrlimit(resource.RLIMIT_NPROC, (WORKER_MAX_PROCESSES, WORKER_MAX_PROCESSES))
        os.setgroups([])
        os.setgid(identity.gid)
        os.setuid(identity.uid)


def become_subreaper() -> None:
    """Orphaned descendants of a sandbox (daemons) are re-parented to the grader, not to init, so the
    grader can find and kill them (Linux only; harmless elsewhere)."""
    try:
        _libc().prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def marked_pids(token: str) -> list[int]:
    """Every process whose environment carries this sandbox's token (escaped daemons included: a forked process
    shows the environment its zygote was started with), this one excepted."""
    marker = f"{TOKEN_VARIABLE}={token}".encode()
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
    return found


def namespace_members(inode: int) -> list[int]:
    """Every process in the PID namespace `inode` (as /proc/PID/ns/pid names it), this one excepted: no process can
    leave its PID namespace, nor change what this says (unlike its environment, which is its own memory)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if os.stat(f"/proc/{entry.name}/ns/pid").st_ino == inode:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def kill_marked(token: str) -> None:
    """Kill every process that carries this sandbox's token (marked_pids)."""
    for _ in range(3):
        found = marked_pids(token)
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
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


def await_exit(pid: int, timeout_s: float = 10.0) -> None:
    """Wait until a killed process (not our child: its zygote or template reaps it) has exited."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[-1].split()[0] in (b"Z", b"X"):
                    return
        except (OSError, IndexError):
            return
        time.sleep(0.005)


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


def host_pid(namespace_pid: int, namespace_inode: int) -> int | None:
    """The pid, as this process sees it, of the process that is `namespace_pid` inside the PID namespace
    with inode `namespace_inode` (/proc/<pid>/status NSpid lists a process's pid in every namespace)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry.name}/ns/pid").st_ino != namespace_inode:
                continue
            with open(f"/proc/{entry.name}/status", encoding="ascii", errors="replace") as f:
                for line in f:
                    if line.startswith("NSpid:"):
                        if int(line.split()[-1]) == namespace_pid:
                            return int(entry.name)
                        break
        except (OSError, ValueError):
            continue
    return None
