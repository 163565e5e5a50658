"""grader/running/worker/zygote.py: its control channel: JSON frames over a Unix socket, file descriptors
passed beside them, a timeout, a closed peer, an oversized frame. (The zygote forking real workers:
tests/running/test_sandbox.py.)"""

from __future__ import annotations

import os
import socket
import struct

import pytest

from grader.running import protocol
from grader.running.worker.zygote import MAX_CONTROL_BYTES, Zygote, receive_control, send_control


def test_messages_and_descriptors_round_trip() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    read, write = os.pipe()
    try:
        status = protocol.encode(protocol.Status(pid=3))
        send_control(left, status, fds=[write])
        message, fds = receive_control(right, timeout=10)
        assert message == status and len(fds) == 1
        os.write(fds[0], b"x")  # the passed descriptor is the pipe's write end
        assert os.read(read, 1) == b"x"
        os.close(fds[0])
        send_control(left, protocol.encode(protocol.KillStrays()))
        assert receive_control(right, timeout=10) == (protocol.encode(protocol.KillStrays()), [])
    finally:
        for fd in (read, write):
            os.close(fd)
        left.close()
        right.close()


def test_timeout_closed_and_oversized() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with pytest.raises(TimeoutError):
            receive_control(right, timeout=0.1)
        left.sendall(struct.pack("<I", MAX_CONTROL_BYTES + 1) + b"{")  # a length past the limit, then data
        with pytest.raises(EOFError, match="oversized"):
            receive_control(right, timeout=5)
        left.close()
        with pytest.raises(EOFError):
            receive_control(right, timeout=5)
    finally:
        right.close()


def test_the_zygote_answers_what_it_cannot_read_with_an_error() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        zygote = Zygote(right)
        unknown = zygote.handle({"op": "exec", "command": "sh"}, [])
        assert not unknown.ok and unknown.failure.type == "ProtocolError" and "'exec'" in unknown.failure.message
        wrong = zygote.handle({"op": "status", "pid": "3"}, [])
        assert not wrong.ok and "Status.pid: an integer" in wrong.failure.message
        no_fds = zygote.handle(protocol.encode(protocol.Fork(backend="interpreter", env={}, cwd="/", log="/dev/null")),
                               [])
        assert not no_fds.ok and "progress pipe" in no_fds.failure.message
        status = zygote.handle(protocol.encode(protocol.Status(pid=12345)), [])
        assert isinstance(status, protocol.ExitStatus) and status.ok and not status.exited  # not one of its workers
    finally:
        left.close()
        right.close()


def _fresh(code: str, interpret: bool) -> str:
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          check=True).stdout.strip()


def test_a_compiling_zygote_computes_tritons_key_once_for_every_fork() -> None:
    """Triton's digest of its own installation (libtriton.so included) is asked for by every compile: a zygote
    where kernels compile computes it in its preload, so a fork finds it cached; an interpreter's zygote does not."""
    code = ("import os; from triton.runtime.cache import triton_key; "
            "from grader.running.worker.zygote import warm_triton_key; warmed = warm_triton_key(); "
            "pid = os.fork()\n"
            "if pid == 0:\n    os._exit(triton_key.cache_info().currsize)\n"
            "print(warmed, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))")
    assert _fresh(code, interpret=False) == "True 1"
    assert _fresh(code, interpret=True) == "False 0"
