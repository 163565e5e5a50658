"""A tensor described as plain data (storage id, dtype, offset, shape, stride), rebuilt on the bytes of its
storage: how a launch record names its tensors (grader.running.worker.launch_record) and how a replay's
buffers are read back (grader.judging.replay). Checks that the view lies inside its storage."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def tensor_from(buffers: Mapping[int, torch.Tensor], described: Mapping[str, Any]) -> torch.Tensor:
    """A tensor viewing `buffers[sid]` (uint8) with the described dtype, offset, shape and stride."""
    dtype = getattr(torch, described["dtype"])
    out = torch.empty(0, dtype=dtype, device=buffers[described["sid"]].device)
    shape, stride, offset = described["shape"], described["stride"], described["offset"]
    capacity = buffers[described["sid"]].numel() // out.element_size()
    if len(shape) != len(stride) or offset < 0 or any(d < 0 for d in shape) or any(s < 0 for s in stride):
        raise ValueError("a tensor view with a bad shape, stride or offset")
    if all(shape) and offset + sum((d - 1) * s for d, s in zip(shape, stride, strict=True)) >= capacity:
        raise ValueError("a tensor view reaching past the end of its storage")
    out.set_(
        buffers[described["sid"]].untyped_storage(),
        described["offset"],
        described["shape"],
        described["stride"],
    )
    return out
