"""The batch's zygote template: `python -m grader.running.worker.zygote_template --listen FD`.

A sandbox's zygote (grader.running.worker.zygote) imports torch, triton and the harness before it forks its first
worker: on an H100 machine ~4.7 s of wall and 8-12 CPU-seconds, once per grade. In a batch every grade's zygote can
instead be a fork of this process, which imported them once (the zygote's PRELOAD; never CUDA, never student code,
never any grade's data: it reads nothing from a connection, so nothing of one grade is in the memory another grade's
zygote inherits).

For each connection on its listening socket (a Unix socket in a folder only the grader's user can enter,
grader.running.processes.shared_zygote) it forks a child, named `sbx-<the grade's pid>` (the connecting process's, from
the kernel: benchmarks/class_phases.py counts the sandbox's CPU to that grade), and forgets the connection; a process in
another PID namespace (a sandbox's, which found the socket) is refused. The child
closes every other descriptor (the listening socket first), reads one `StartZygote`, and confines itself as a fresh
sandbox zygote's
`unshare --pid --fork --kill-child --mount-proc --net` and `setpriv` command would (grader.running.processes.sandbox):
the resource limits, a session of its own, new PID, mount and network namespaces, mounts made private; then it forks
the zygote proper (PID 1 of the new namespace: it dies with the child, the child waits for it and exits with its
status), which mounts its own /proc, hides the requested folders under empty tmpfs mounts, takes the request's
environment, folder and log, drops to the sandbox's user with no new privileges and serves the connection as any
zygote does (`Zygote.serve`: its `ZygoteReady` first). The child answers `ZygoteStarted` with the zygote's pid before
the zygote speaks. Anything that fails on the way ends the child (and the connection): the grader then starts a
fresh zygote.
"""

from __future__ import annotations

import ctypes
import os
import resource
import select
import signal
import socket
import sys
from typing import Any

from grader.running import protocol
from grader.running.worker.zygote import Zygote, outside_every_sandbox, peer_pid, receive_control, send_control

REQUEST_TIMEOUT_S = 30.0
_CLONE_NEWNS, _CLONE_NEWPID, _CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 0x4000, 1 << 18
_PR_SET_PDEATHSIG, _PR_SET_NAME, _PR_SET_NO_NEW_PRIVS = 1, 15, 38
_CONTROL_FD = 3


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def serve(listener: socket.socket, backend: str) -> int:
    """Accept and fork until the batch ends (this process dies with it: its parent set PR_SET_PDEATHSIG)."""
    template = Zygote(listener)  # its preload and its reaping; it forks no worker itself
    template.preload()
    while True:
        template.reap()
        if not select.select([listener], [], [], 0.5)[0]:
            continue
        try:
            connection, _ = listener.accept()
        except OSError:
            continue
        try:
            peer = peer_pid(connection)
        except OSError:
            peer = 0
        if not peer or not outside_every_sandbox(peer):  # a sandbox's process found the socket: nothing for it
            connection.close()
            continue
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                _libc().prctl(_PR_SET_NAME, f"sbx-{peer}".encode()[:15], 0, 0, 0)  # `ps` shows whose sandbox it is
                code = _become_confined(connection, listener, backend)
            except BaseException:  # noqa: BLE001 - into the template's log
                import traceback

                traceback.print_exc()
            finally:
                os._exit(code)
        connection.close()  # the child's now: nothing of it stays here


def _become_confined(connection: socket.socket, listener: socket.socket, backend: str) -> int:
    """The child: everything but the connection closed, one request read, confined, the zygote forked and waited for."""
    listener.close()
    accepted = connection.detach()
    if accepted != _CONTROL_FD:
        os.dup2(accepted, _CONTROL_FD)
        os.close(accepted)
    os.closerange(_CONTROL_FD + 1, os.sysconf("SC_OPEN_MAX"))
    control = socket.socket(fileno=_CONTROL_FD)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    try:
        message, fds = receive_control(control, REQUEST_TIMEOUT_S)
        for fd in fds:
            os.close(fd)
        request = protocol.decode_request(message, protocol.TEMPLATE_REQUESTS)
    except (EOFError, OSError, TimeoutError, ValueError, protocol.ProtocolError):
        return 64
    assert isinstance(request, protocol.StartZygote)
    if request.backend != backend:
        send_control(control, protocol.encode(protocol.error_reply(
            "ProtocolError", f"this template forks {backend} zygotes, not {request.backend}")))
        return 65
    libc = _libc()
    _check(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "PR_SET_PDEATHSIG")  # ends with the batch
    os.setsid()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # oversized writes fail instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (request.file_limit, request.file_limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (request.cpu_limit_s, request.cpu_limit_s))
    if request.address_limit:
        resource.setrlimit(resource.RLIMIT_AS, (request.address_limit, request.address_limit))
    _check(libc.unshare(_CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET), "unshare")
    _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "making mounts private")
    go_read, go_write = os.pipe()
    zygote = os.fork()  # PID 1 of the new namespace
    if zygote == 0:
        os.close(go_write)
        code = 71
        try:
            os.read(go_read, 1)  # after the child told the grader this pid
            os.close(go_read)
            code = _become_zygote(control, request, libc)
        except BaseException:  # noqa: BLE001 - into the zygote's log when it got that far
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(go_read)
    send_control(control, protocol.encode(protocol.ZygoteStarted(ok=True, pid=zygote)))
    control.close()  # the zygote's alone: its end closing is the grader's end of the sandbox
    os.write(go_write, b"g")
    os.close(go_write)
    while True:  # as `unshare --fork`: wait for it and exit as it did (it dies with this process)
        try:
            _, status = os.waitpid(zygote, 0)
        except InterruptedError:
            continue
        return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _become_zygote(control: socket.socket, request: protocol.StartZygote, libc: Any) -> int:
    _check(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "PR_SET_PDEATHSIG")
    _check(libc.mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None), "mounting /proc")
    for folder in request.hide:
        if os.path.isdir(folder):
            _check(libc.mount(b"tmpfs", folder.encode(), b"tmpfs", 0, b"size=1m,mode=0555"), f"hiding {folder}")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    log = os.open(request.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # the grader's file, as a fresh one's
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    _move_to(request.cwd)
    for name in list(os.environ):
        if name not in request.env:
            del os.environ[name]
    os.environ.update(request.env)
    if request.uid is not None and request.gid is not None:
        os.setgroups([])
        os.setgid(request.gid)
        os.setuid(request.uid)
    _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
    return Zygote(control).serve()


def _move_to(folder: str) -> None:
    """Into the sandbox's folder, with the import path a fresh zygote started there has: `python -m` put the
    template's own folder (0700, the grader's) first on sys.path, where a fresh zygote has its folder."""
    template_folder = os.getcwd()
    os.chdir(folder)
    sys.path[:] = [folder if entry == template_folder else entry for entry in sys.path]


def main() -> int:
    if len(sys.argv) != 4 or sys.argv[1] != "--listen":
        print("usage: python -m grader.running.worker.zygote_template --listen FD BACKEND", file=sys.stderr)
        return 2
    return serve(socket.socket(fileno=int(sys.argv[2])), sys.argv[3])


if __name__ == "__main__":
    os._exit(main())
