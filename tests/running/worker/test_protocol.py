"""grader/running/worker/protocol.py: the sanitizer's marker lines (what grader.running.sanitizer parses),
and the old length-prefixed framing (benchmarks/channel_throughput.py compares it with the channel):
round trips over a pipe, a timeout, a closed peer, an oversized length."""

from __future__ import annotations

import os
import threading

import pytest
import torch

from grader.running.worker import protocol


def test_marker_lines_are_what_the_sanitizer_reads() -> None:
    from grader.running import sanitizer

    assert protocol.POINTERS_LINE.endswith(":") and protocol.ALLOCATION_LINE.endswith(":")
    assert sanitizer.POINTERS_LINE is protocol.POINTERS_LINE and sanitizer.ALLOCATION_LINE is protocol.ALLOCATION_LINE


def test_round_trip_over_a_pipe() -> None:
    read, write = os.pipe()
    try:
        message = {"op": "run", "x": torch.arange(6.0).reshape(2, 3), "ids": [1, 2], "blob": b"\x00\x01"}
        big = {"t": torch.zeros(300_000)}  # larger than a pipe's buffer: the writer blocks until read
        writer = threading.Thread(target=lambda: (protocol.send(write, message), protocol.send(write, big)))
        writer.start()
        got = protocol.receive(read, timeout=60)
        assert got["op"] == "run" and got["ids"] == [1, 2] and got["blob"] == b"\x00\x01"
        assert torch.equal(got["x"], message["x"])
        assert torch.equal(protocol.receive(read, timeout=60)["t"], big["t"])
        writer.join(timeout=60)
        assert protocol.decode(protocol.encode([1, "a"])[8:]) == [1, "a"]
    finally:
        os.close(read)
        os.close(write)


def test_timeout_closed_and_oversized() -> None:
    read, write = os.pipe()
    try:
        with pytest.raises(protocol.ChannelTimeout):
            protocol.receive(read, timeout=0.1)
        os.write(write, (protocol.MAX_MESSAGE_BYTES + 1).to_bytes(8, "little"))
        with pytest.raises(protocol.ChannelClosed):
            protocol.receive(read, timeout=5)
        os.close(write)
        write = -1
        with pytest.raises(protocol.ChannelClosed):
            protocol.receive(read, timeout=5)
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)
