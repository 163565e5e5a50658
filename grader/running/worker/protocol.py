"""Framing between the grader and its worker: length-prefixed `torch.save` payloads over pipes.

Payloads are loaded with `weights_only=True`, which only rebuilds tensors and plain containers:
a hostile worker cannot make the grader execute code by sending a crafted pickle.
"""

from __future__ import annotations

import io
import os
import select
import struct
import time
from typing import Any

import torch

# A launch under compute-sanitizer prints its buffers' device addresses on this line first (the
# invalid access it is run to find often kills the worker before it can reply).
POINTERS_LINE = "grader-buffer-addresses:"
# A wrapper called under compute-sanitizer prints one such line per tensor it allocates: the address and
# size of the allocation (its guarded storage) and its shape, so memcheck's nearest allocation has a name.
ALLOCATION_LINE = "grader-allocation:"

_HEADER = struct.Struct("<Q")
MAX_MESSAGE_BYTES = 1 << 31


class ChannelClosed(Exception):
    """The other side closed its end (the worker died or the grader went away)."""


class ChannelTimeout(Exception):
    """No complete message arrived before the deadline."""


def encode(message: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(message, buffer)
    payload = buffer.getvalue()
    return _HEADER.pack(len(payload)) + payload


def decode(payload: bytes) -> Any:
    return torch.load(io.BytesIO(payload), weights_only=True)


def send(fd: int, message: Any) -> None:
    data = memoryview(encode(message))
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _read_exactly(fd: int, size: int, deadline: float | None) -> bytes:
    chunks = []
    remaining = size
    while remaining:
        if deadline is not None:
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                raise ChannelTimeout()
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                raise ChannelTimeout()
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise ChannelClosed()
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def receive(fd: int, timeout: float | None = None) -> Any:
    deadline = None if timeout is None else time.monotonic() + timeout
    (size,) = _HEADER.unpack(_read_exactly(fd, _HEADER.size, deadline))
    if size > MAX_MESSAGE_BYTES:
        raise ChannelClosed()
    return decode(_read_exactly(fd, size, deadline))
