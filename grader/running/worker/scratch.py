"""Inside a kernel host on CUDA: Triton's runtime scratch, given by the grader.

A kernel that builds tensor descriptors on the device (`tl.make_tensor_descriptor`, Hopper's TMA) needs global
memory at every launch, which Triton asks of the allocator set with `triton.set_allocator`. A submission sets one at
module level, which a kernel host never runs; so the host sets the grader's own (`install`), and such a kernel runs
there as it did in the submission's worker.

A launch captured in a CUDA graph writes its scratch again at every replay: that buffer lives as long as the graph
(`kept_by`; a buffer given back would be a free block of the graph's pool that replays write, and the timer's memory
watch, grader.running.worker.measuring.memory_watch, rightly refuses memory outside the case's buffers that changes
during a sample). A capture's launches run one after another on one stream, so those that ask for the same size share
one buffer: a graph of 4,096 launches keeps one, not 4,096. Every replay writes the same descriptors in the same
order, so the watch sees no change. A launch captured outside `kept_by` keeps its scratch for the process's life.
Outside a capture a buffer lives as long as Triton holds it (the launch).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import triton

Kept = dict[tuple[int, int], torch.Tensor]  # (size, alignment) -> the buffer a capture's launches of that size share

_CAPTURES: list[Kept] = []  # the scratch of each capture under way (`kept_by`), innermost last
_FOR_LIFE: list[torch.Tensor] = []  # scratch of launches captured outside `kept_by`


def scratch(size: int, alignment: int, stream: Any = None) -> torch.Tensor:
    """`size` bytes on the current CUDA device whose address is a multiple of `alignment` (Triton's allocator
    protocol; the stream is the current one)."""
    return _aligned(size, alignment, "cuda", torch.cuda.is_current_stream_capturing())


def _aligned(size: int, alignment: int, device: str, capturing: bool) -> torch.Tensor:
    alignment = max(int(alignment), 1)
    kept = _CAPTURES[-1] if capturing and _CAPTURES else None
    if kept is not None and (size, alignment) in kept:
        return kept[(size, alignment)]
    buffer = torch.empty(size + alignment, dtype=torch.int8, device=device)
    start = -buffer.data_ptr() % alignment
    aligned = buffer[start:start + size]
    if kept is not None:
        kept[(size, alignment)] = aligned
    elif capturing:
        _FOR_LIFE.append(aligned)
    return aligned


@contextlib.contextmanager
def kept_by(graph: Any) -> Iterator[None]:
    """The scratch of the launches captured in the block lives as long as `graph` (kept on it)."""
    kept: Kept = {}
    _CAPTURES.append(kept)
    try:
        yield
    finally:
        _CAPTURES.remove(kept)
        graph.grader_scratch = tuple(kept.values())


def install() -> None:
    """The grader's scratch for every kernel this process launches (this thread's context, Triton's ContextVar)."""
    triton.set_allocator(scratch)
