"""Worker entry point: `python -m grader.running.worker BACKEND READ_FD WRITE_FD`.

The grader starts this in a fresh temporary directory, in its own process group, with the
environment it chose (TRITON_INTERPRET=1 for the interpreter backend). It answers one request at a
time until the grader closes the pipe.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    backend, read_fd, write_fd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    # Imported here, after the grader set the environment (TRITON_INTERPRET is read at @jit time).
    from grader.running.worker.harness import Harness
    from grader.running.worker.protocol import ChannelClosed, receive, send

    harness = Harness(backend)
    send(write_fd, {"ok": True, "ready": True, "pid": os.getpid()})
    while True:
        try:
            request = receive(read_fd)
        except ChannelClosed:
            return 0
        op = request.get("op")
        if op == "load":
            reply = harness.load(request["path"], request["names"])
        elif op == "launch":
            reply = harness.launch(request)
        elif op == "call":
            reply = harness.call(request)
        elif op == "compile":
            reply = harness.compile(request)
        elif op == "time":
            reply = harness.time(request)
        elif op == "replay":
            reply = harness.replay(request)
        elif op in ("time_launches", "time_kept"):
            reply = harness.time_launches(request)
        else:
            reply = {"ok": False, "error": {"type": "ProtocolError", "message": f"unknown op {op!r}",
                                            "frames": []}}
        reply["compile_s"] = harness.compile_seconds()
        send(write_fd, reply)
        if reply.get("fatal"):
            return 70  # the device context is unusable; the grader starts a fresh worker


if __name__ == "__main__":
    os._exit(main())
