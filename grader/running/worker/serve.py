"""The worker's request loop: answer one request at a time until the grader closes the channel.

Started either as a fresh process (`python -m grader.running.worker BACKEND READ_FD WRITE_FD`, for workers
run under a tool such as compute-sanitizer) or in a child the sandbox's zygote forked
(grader.running.worker.zygote). Requests are dispatched by their `op` through one table (HANDLERS).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

# The modules a forked worker expects to find already imported (the zygote preloads them); the ready
# message says whether they were, so the grader can tell a warm start from a cold one.
PRELOADED = ("torch", "triton", "numpy", "torch._dynamo", "grader.running.worker.harness")


def handlers(harness: Any) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
    """The worker's dispatch table: one handler per request op."""
    return {
        "load": lambda r: harness.load(r["path"], r["names"]),
        "launch": harness.launch,
        "call": harness.call,
        "compile": harness.compile,
        "warmup": harness.warmup,
        "time": harness.time,
        "replay": harness.replay,
        "time_launches": harness.time_launches,
        "time_kept": harness.time_launches,
    }


def serve(backend: str, channel_fd: int, progress_fd: int = -1, warm: bool = False) -> int:
    """Answer requests on the socket `channel_fd` until the grader closes it; the exit code (70 after a fatal
    device error). `progress_fd`: where progress marks go (grader.running.worker.progress), -1 for none."""
    already = all(name in sys.modules for name in PRELOADED)
    from grader.running.worker import progress

    progress.connect(progress_fd)
    # Imported here, after the environment was set (TRITON_INTERPRET is read at @jit time).
    import socket

    from grader.running.worker.channel import Channel, ChannelClosed
    from grader.running.worker.harness import Harness

    channel = Channel(socket.socket(fileno=channel_fd))
    harness = Harness(backend)
    table = handlers(harness)
    channel.send({"ok": True, "ready": True, "pid": os.getpid(), "warm": bool(warm and already)})
    request: Any = None
    while True:
        del request  # the last request's tensors are not kept alive while the next one arrives
        try:
            request = channel.receive()
        except ChannelClosed:
            return 0
        op = request.get("op") if isinstance(request, dict) else None
        handler = table.get(op) if isinstance(op, str) else None
        if handler is None:
            reply = {"ok": False, "error": {"type": "ProtocolError", "message": f"unknown op {op!r}", "frames": []}}
        else:
            reply = handler(request)
        reply["compile_s"] = harness.compile_seconds()
        try:
            channel.send(reply)
        except ChannelClosed:
            return 0
        if reply.get("fatal") or reply.get("exits"):
            return 70  # the device context is unusable; the grader starts a fresh worker
