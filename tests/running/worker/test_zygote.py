"""grader/running/worker/zygote.py: its control channel: JSON frames over a Unix socket, file descriptors
passed beside them, a timeout, a closed peer, an oversized frame. (The zygote forking real workers:
tests/running/test_sandbox.py.)"""

from __future__ import annotations

import os
import socket
import struct

import pytest

from grader.running.worker.zygote import MAX_CONTROL_BYTES, receive_control, send_control


def test_messages_and_descriptors_round_trip() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    read, write = os.pipe()
    try:
        send_control(left, {"op": "fork", "id": 3}, fds=[write])
        message, fds = receive_control(right, timeout=10)
        assert message == {"op": "fork", "id": 3} and len(fds) == 1
        os.write(fds[0], b"x")  # the passed descriptor is the pipe's write end
        assert os.read(read, 1) == b"x"
        os.close(fds[0])
        send_control(left, {"op": "reap"})
        assert receive_control(right, timeout=10) == ({"op": "reap"}, [])
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
