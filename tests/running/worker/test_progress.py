"""grader/running/worker/progress.py: one byte per event on the grader's pipe, dropped (never blocking)
when the pipe is full or gone, and nothing at all when no pipe is connected."""

from __future__ import annotations

import os

from grader.running.worker import progress


def test_marks_reach_the_pipe_and_never_block() -> None:
    read, write = os.pipe()
    try:
        progress.connect(write)
        for event in (progress.COMPILE_START, progress.COMPILE_END, progress.LAUNCH, progress.STEP):
            progress.mark(event)
        assert os.read(read, 16) == b"CcLS"
        for _ in range(100_000):  # more than a pipe holds: the extra marks are dropped
            progress.mark(progress.LAUNCH)
        os.close(read)
        read = -1
        progress.mark(progress.LAUNCH)  # nobody reads any more: still no error
    finally:
        progress.connect(-1)
        os.close(write)
        if read >= 0:
            os.close(read)


def test_no_pipe_no_marks() -> None:
    progress.connect(-1)
    progress.mark(progress.LAUNCH)  # a no-op
    assert len({progress.COMPILE_START, progress.COMPILE_END, progress.LAUNCH, progress.STEP}) == 4
