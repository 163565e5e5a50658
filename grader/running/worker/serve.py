"""The worker's request loop: answer one request at a time until the grader closes the channel.

Started either as a fresh process (`python -m grader.running.worker BACKEND READ_FD WRITE_FD`, for workers
run under a tool such as compute-sanitizer) or in a child the sandbox's zygote forked
(grader.running.worker.zygote). Requests are decoded by grader.running.protocol and dispatched by their type
through one table (`handlers`).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any

from grader.running import protocol

# The modules a forked worker expects to find already imported (the zygote preloads them); the ready
# message says whether they were, so the grader can tell a warm start from a cold one.
PRELOADED = ("torch", "triton", "numpy", "grader.running.worker.harness")


def handlers(harness: Any) -> dict[type[protocol.Request[Any]], Callable[[Any], protocol.Reply]]:
    """The worker's dispatch table: one handler per request type (grader.running.protocol)."""
    return {
        protocol.Load: harness.load,
        protocol.LoadKernels: harness.load_kernels,
        protocol.Launch: harness.launch,
        protocol.Call: harness.call,
        protocol.Compile: harness.compile,
        protocol.Warmup: harness.warmup,
        protocol.Run: harness.run,
        protocol.Replay: harness.replay,
        protocol.TimeLaunches: harness.time_launches,
        protocol.TimeKept: harness.time_kept,
        protocol.ProfileKept: harness.profile_kept,
    }


def answer(table: dict[type[protocol.Request[Any]], Callable[[Any], protocol.Reply]], tree: Any,
           compile_s: Callable[[], float]) -> protocol.Reply:
    """The reply to one request as it came off the channel: decoded, dispatched by its type, stamped with the
    worker's compile seconds; a request that does not decode gets an error reply."""
    try:
        request = protocol.decode_request(tree)
    except protocol.ProtocolError as exc:
        reply = protocol.error_reply("ProtocolError", str(exc))
    else:
        reply = table[type(request)](request)
    return dataclasses.replace(reply, compile_s=compile_s())


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
    channel.send(protocol.encode(protocol.Ready(ok=True, pid=os.getpid(), warm=bool(warm and already))))
    request: Any = None
    while True:
        del request  # the last request's tensors are not kept alive while the next one arrives
        try:
            request = channel.receive()
        except ChannelClosed:
            return 0
        reply = answer(table, request, harness.compile_seconds)
        try:
            channel.send(protocol.encode(reply))
        except ChannelClosed:
            return 0
        if reply.fatal or reply.exits:
            return 70  # the device context is unusable; the grader starts a fresh worker
