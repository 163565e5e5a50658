"""The sandbox's zygote: `python -m grader.running.worker.zygote CONTROL_FD`.

The grader starts one zygote per submission and grade, inside the sandbox it built for that submission
(grader.running.processes.sandbox: own process group, resource limits, and as root its own PID, mount and network
namespaces with the course's secrets hidden, as user `nobody`). The zygote imports what every worker
needs (torch, triton, numpy, the harness: ~4-6 s that each fresh worker used to spend; not torch._dynamo, which no
worker needs: 6 more seconds on an H100 machine, benchmarks/zygote_imports.py),
never initialises CUDA and never imports student code. For each request of the grader it forks a worker:
the child leads a process group of its own, takes the channel fds the grader passed (SCM_RIGHTS), its
environment, folder and log, and serves requests (grader.running.worker.serve). Forking takes
milliseconds, so the submission's worker, the replayer and the timer start warm, and a worker replaced
after a bad case costs a fork instead of a Python start.

The zygote holds no deadline and no lock: the grader kills workers itself (their process groups) and
kills the whole sandbox when the zygote stops answering. The zygote is the reaper of its workers'
orphans (PID 1 of its namespace, or a child subreaper): `strays` kills every process it did not fork.

Control messages are length-prefixed JSON (no tensors on this channel), each one of grader.running.protocol's:
`Fork` (+ fds: the channel's socket and the progress pipe) -> `Forked`; `Status` -> `ExitStatus` (status as
subprocess reports it: -signal or the exit code); `KillStrays` -> `StraysKilled`.

`python -m grader.running.worker.zygote --listen FD` is the batch's shared zygote for trusted workers (the reference
solution's: grader.running.processes.shared_zygote): FD is a listening Unix socket in a folder only the grader can
enter; every connection is one grade's control channel (the same messages), told `ZygoteReady` as it is accepted.
A connection sees and asks after only its own workers, and its workers are killed when it closes.
"""

from __future__ import annotations

import array
import importlib
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Sequence
from typing import Any

from grader.running import protocol

_HEADER = struct.Struct("<I")
MAX_CONTROL_BYTES = 1 << 20
MAX_FDS = 8
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
PRELOAD = ("torch", "triton", "triton.language", "numpy", "torch.utils._python_dispatch",
           "triton.compiler", "grader.running.worker.harness", "grader.running.worker.serve")


# --------------------------------------------------------------------------- the control channel (both sides)


def send_control(sock: socket.socket, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
    data = json.dumps(message).encode()
    frame = _HEADER.pack(len(data)) + data
    if fds:
        sent = sock.sendmsg([frame[:1]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        frame = frame[sent:]
    sock.sendall(frame)


def receive_control(sock: socket.socket, timeout: float | None = None) -> tuple[dict[str, Any], list[int]]:
    """One message and the fds that came with it; raises EOFError when the peer closed, TimeoutError."""
    deadline = None if timeout is None else time.monotonic() + timeout
    fds: list[int] = []
    data = b""
    try:
        while len(data) < _HEADER.size or len(data) < _HEADER.size + _HEADER.unpack(data[:_HEADER.size])[0]:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([sock], [], [], left)[0]:
                    raise TimeoutError("no answer from the zygote")
            want = _HEADER.size if len(data) < _HEADER.size else _HEADER.size + _HEADER.unpack(data[:4])[0]
            if want - _HEADER.size > MAX_CONTROL_BYTES:
                raise EOFError("oversized control message")
            chunk, ancillary, _flags, _addr = sock.recvmsg(want - len(data), socket.CMSG_SPACE(MAX_FDS * 4))
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    received = array.array("i")
                    received.frombytes(payload[: len(payload) - len(payload) % received.itemsize])
                    fds.extend(received)
            if not chunk:
                raise EOFError("the control channel closed")
            data += chunk
        message = json.loads(data[_HEADER.size:])
        if not isinstance(message, dict):
            raise EOFError("malformed control message")
        return message, fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def peer_pid(connection: socket.socket) -> int:
    """The connecting process's pid (SO_PEERCRED: the kernel's word, no byte read from the connection)."""
    pid, _uid, _gid = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                               struct.calcsize("3i")))
    return int(pid)


def outside_every_sandbox(pid: int) -> bool:
    """Is `pid` in this process's PID namespace? A batch's shared zygotes serve its grades, never a process of a
    sandbox (each has a PID namespace of its own, which it cannot leave), whatever user the sandbox runs as."""
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino == os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return False


# --------------------------------------------------------------------------- the zygote


def warm_triton_key() -> bool:
    """Triton's key of its own installation (a digest of its sources and of libtriton.so, ~400 MB: 0.2 CPU-s on the
    2-core machine), which every compile asks for, computed once here where kernels compile (not under the
    interpreter), so each fork has it instead of computing it again at its first compile or launch. Read from Triton's
    installed files only, before any submission is loaded. False where this Triton has no such function."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return False
    try:
        from triton.runtime.cache import triton_key
    except ImportError:
        return False
    try:
        triton_key()
    except Exception:  # a worker computes it again and reports what is wrong
        return False
    return True


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


class Zygote:
    def __init__(self, control: socket.socket) -> None:
        self.control = control
        self.pid = os.getpid()
        self.forked: dict[int, int | None] = {}  # pid -> exit status (None while running)
        self.owners: dict[int, socket.socket] = {}  # pid -> the connection that asked for it (shared zygote)
        self.connections: list[socket.socket] = []  # the shared zygote's grades

    def preload(self) -> list[str]:
        loaded = []
        for name in PRELOAD:
            try:
                importlib.import_module(name)
                loaded.append(name)
            except Exception:  # a worker imports it again and reports what is wrong
                pass
        warm_triton_key()
        return loaded

    def _ready_message(self, loaded: Sequence[str]) -> dict[str, Any]:
        import torch

        return protocol.encode(protocol.ZygoteReady(
            ok=True, pid=self.pid, preloaded=tuple(loaded), cuda_initialized=bool(torch.cuda.is_initialized())))

    def serve(self) -> int:
        libc = _libc()
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans of workers come back here (strays)
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)  # workers (same user) cannot ptrace it or read its memory
        loaded = self.preload()
        send_control(self.control, self._ready_message(loaded))
        while True:
            self.reap()
            ready = select.select([self.control], [], [], 0.5)[0]
            if not ready:
                continue
            try:
                message, fds = receive_control(self.control)
            except (EOFError, OSError, ValueError):
                self.kill_all()
                return 0
            send_control(self.control, protocol.encode(self._answer(message, fds)))

    def _answer(self, message: dict[str, Any], fds: list[int], owner: socket.socket | None = None) -> protocol.Reply:
        """`handle`, then the fds that came with the message closed here (a forked worker has its own copies)."""
        try:
            return self.handle(message, fds, owner)
        finally:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def handle(self, message: dict[str, Any], fds: list[int], owner: socket.socket | None = None) -> protocol.Reply:
        """One control request; `owner`: the connection it came on (shared zygote: it sees only its own workers)."""
        try:
            request = protocol.decode_request(message, protocol.ZYGOTE_REQUESTS)
        except protocol.ProtocolError as exc:
            return protocol.error_reply("ProtocolError", str(exc))
        match request:
            case protocol.Fork():
                if len(fds) != 2:
                    why = "fork needs the channel's socket and the progress pipe"
                    return protocol.error_reply("ProtocolError", why)
                pid = self.fork(request, fds)
                if owner is not None:
                    self.owners[pid] = owner
                return protocol.Forked(ok=True, pid=pid)
            case protocol.Status(pid=pid):
                self.reap()
                if owner is not None and self.owners.get(pid) is not owner:
                    return protocol.ExitStatus(ok=True, exited=False, status=None)
                status = self.forked.get(pid)
                return protocol.ExitStatus(ok=True, exited=pid in self.forked and status is not None, status=status)
            case protocol.KillStrays():
                return protocol.StraysKilled(ok=True, killed=self.kill_strays())
        return protocol.error_reply("ProtocolError", f"no handler for {type(request).__name__}")

    def serve_many(self) -> int:
        """The shared zygote: `self.control` listens; each accepted connection is one grade's control channel."""
        libc = _libc()
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        loaded = self.preload()
        ready = self._ready_message(loaded)
        connections = self.connections
        while True:
            self.reap()
            readable = select.select([self.control, *connections], [], [], 0.5)[0]
            for sock in readable:
                if sock is self.control:
                    try:
                        accepted, _ = self.control.accept()
                        if not outside_every_sandbox(peer_pid(accepted)):
                            accepted.close()  # a sandbox's process found the socket: nothing for it
                            continue
                        send_control(accepted, ready)
                        connections.append(accepted)
                    except OSError:
                        pass
                    continue
                try:
                    message, fds = receive_control(sock)
                except (EOFError, OSError, ValueError):
                    connections.remove(sock)
                    self.kill_all(sock)
                    sock.close()
                    continue
                reply = self._answer(message, fds, sock)
                try:
                    send_control(sock, protocol.encode(reply))
                except OSError:
                    pass  # it closed: its end is read next

    def fork(self, message: protocol.Fork, fds: list[int]) -> int:
        channel_fd, progress_fd = fds
        pid = os.fork()
        if pid == 0:  # the worker
            try:
                code = self._become_worker(message, channel_fd, progress_fd)
            except BaseException:  # into the worker's log when it got that far, else the zygote's
                import traceback

                traceback.print_exc()
                code = 71
            os._exit(code)
        self.forked[pid] = None
        return pid

    def _become_worker(self, message: protocol.Fork, channel_fd: int, progress_fd: int) -> int:
        os.setsid()  # a process group of its own: the grader kills exactly this worker
        libc = _libc()
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # dies with the zygote
        if os.getppid() != self.pid:
            return 1
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        self.control.close()
        for connection in self.connections:  # the shared zygote's: no worker holds another grade's channel
            connection.close()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        log = os.open(message.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.chdir(message.cwd)
        environment = dict(message.env)
        for name in list(os.environ):
            if name not in environment:
                del os.environ[name]
        os.environ.update(environment)
        limit = message.address_limit
        if limit is not None and limit > 0:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        from grader.running.worker.serve import serve

        return serve(message.backend, channel_fd, progress_fd, warm=True)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.forked:
                self.forked[pid] = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)

    def kill_strays(self) -> int:
        """Kill every process that is not the zygote or one of its live workers (escaped daemons that were
        re-parented here): their process groups too."""
        live = {pid for pid, status in self.forked.items() if status is None}
        killed = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            if pid == self.pid or pid in live:
                continue
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[-1].split()
                parent, group = int(fields[1]), int(fields[2])
            except (OSError, ValueError, IndexError):
                continue
            if parent != self.pid or group in live:
                continue  # not ours, or a live worker's own child (it dies with that worker's group)
            for target in (group, pid):
                try:
                    os.killpg(target, signal.SIGKILL) if target == group else os.kill(target, signal.SIGKILL)
                except OSError:
                    pass
            killed += 1
        time.sleep(0.01)
        self.reap()
        return killed

    def kill_all(self, owner: socket.socket | None = None) -> None:
        """Kill every live worker (`owner`'s only, where given: a grade's connection closed) and the strays."""
        for pid, status in self.forked.items():
            if status is None and (owner is None or self.owners.get(pid) is owner):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
        self.kill_strays()


def main() -> int:
    if sys.argv[1] == "--listen":
        return Zygote(socket.socket(fileno=int(sys.argv[2]))).serve_many()
    control = socket.socket(fileno=int(sys.argv[1]))
    return Zygote(control).serve()


if __name__ == "__main__":
    os._exit(main())
