"""Inside a kernel host on CUDA: Triton's runtime scratch, given by the grader.

A kernel that builds tensor descriptors on the device (`tl.make_tensor_descriptor`, Hopper's TMA) needs global
memory at every launch, which Triton asks of the allocator set with `triton.set_allocator`. A submission sets one at
module level, which a kernel host never runs; so the host sets the grader's own (`install`), and such a kernel runs
there as it did in the submission's worker.

A launch captured in a CUDA graph writes its scratch again at every replay: that buffer is kept for the life of the
process (a buffer given back would be a free block of the graph's pool that replays write, and the timer's memory
watch, grader.running.worker.measuring.memory_watch, rightly refuses memory outside the case's buffers that changes
during a sample). A kept buffer is written the same descriptors at every replay, so the watch sees no change.
Outside a capture the buffer lives as long as Triton holds it (the launch).
"""

from __future__ import annotations

from typing import Any

import torch
import triton

_KEPT: list[torch.Tensor] = []  # scratch of launches captured in graphs: replays write it


def scratch(size: int, alignment: int, stream: Any = None) -> torch.Tensor:
    """`size` bytes on the current CUDA device whose address is a multiple of `alignment` (Triton's allocator
    protocol; the stream is the current one)."""
    return _aligned(size, alignment, "cuda", torch.cuda.is_current_stream_capturing())


def _aligned(size: int, alignment: int, device: str, capturing: bool) -> torch.Tensor:
    alignment = max(int(alignment), 1)
    buffer = torch.empty(size + alignment, dtype=torch.int8, device=device)
    start = -buffer.data_ptr() % alignment
    aligned = buffer[start:start + size]
    if capturing:
        _KEPT.append(aligned)
    return aligned


def install() -> None:
    """The grader's scratch for every kernel this process launches (this thread's context, Triton's ContextVar)."""
    triton.set_allocator(scratch)
