"""Progress marks a worker writes while it works on a request, for the grader's deadlines.

The grader holds every deadline (grader.running.processes.client.Deadline): a request may take long while Triton
compiles (seconds per kernel on a cold cache) but, on a GPU, a kernel that still has not finished a few
seconds after its last launch is spinning. The worker writes one byte per event to a pipe the grader
reads while it waits: compile start and end (JITFunction._do_compile, the parallel warm-up) and every
kernel launch, and the steps after the kernels finished (syncing, copying outputs out). A submission can
write marks too; that only stretches its own request up to the
deadline's cap.
"""

from __future__ import annotations

import os

COMPILE_START = b"C"
COMPILE_END = b"c"
LAUNCH = b"L"
STEP = b"S"  # the kernels finished and the worker moves on (copying outputs, recording buffers)

_fd = [-1]


def connect(fd: int) -> None:
    """Write marks to `fd` (non-blocking: when the grader is not reading, marks are dropped)."""
    if fd >= 0:
        os.set_blocking(fd, False)
    _fd[0] = fd


def mark(event: bytes) -> None:
    if _fd[0] < 0:
        return
    try:
        os.write(_fd[0], event)
    except OSError:  # the pipe is full (the grader reads it only while it waits) or gone
        pass
