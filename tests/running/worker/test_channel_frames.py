"""grader/running/worker/channel_frames.py, no socket: a message's bulk tensors taken out of its tree into a table
(the caller's containers untouched, one tensor sent twice one entry), and on receipt every entry checked before a
tensor is built: a view past its storage, a storage the descriptors or the streamed bytes do not account for, a
bad marker, a cycle, a skeleton that is not one are each a ChannelError."""

from __future__ import annotations

import io

import pytest
import torch

from grader.running.worker.channel_frames import (
    FORMAT,
    MARK,
    MEMFD,
    STREAM,
    ChannelError,
    Substitution,
    check_storages,
    check_view,
    encode_frame,
    load_skeleton,
)


def test_bulk_tensors_leave_the_tree_and_small_ones_stay() -> None:
    big, small = torch.arange(64.0), torch.ones(2)
    message = {"a": big, "b": [big[8:], small], "c": (big,)}
    frame = encode_frame(message, threshold=64, max_fds=0)
    assert message["a"] is big  # the caller's tree is left as it was
    fmt, tree, views, table = torch.load(io.BytesIO(bytes(frame.skeleton)), weights_only=True)
    assert fmt == FORMAT and table == [(STREAM, 256)] and frame.bulk_bytes == 256
    assert tree["a"] == (MARK, 0) and tree["c"] == ((MARK, 0),)  # one tensor, one view
    assert tree["b"][0] == (MARK, 1) and torch.equal(tree["b"][1], small)
    assert views[1] == (0, torch.float32, (56,), (1,), 8)  # a view of the same storage, at its offset
    assert encode_frame(message, threshold=64, max_fds=1).memfd_data and encode_frame(
        message, threshold=64, max_fds=1).streamed == []


def test_every_table_entry_is_checked() -> None:
    storages = [(STREAM, 16), (MEMFD, 8)]
    check_storages(storages, nfds=1, streamed=16, max_bulk_bytes=24)
    for storages_, nfds, streamed, limit, says in (
        ([(STREAM, 16), (MEMFD, 8)], 0, 16, 100, "descriptors"),
        ([(STREAM, 16)], 0, 15, 100, "add up"),
        ([(STREAM, 16)], 0, 16, 15, "over max_bulk_bytes"),
        ([(7, 16)], 0, 16, 100, "bad storage entry"),
    ):
        with pytest.raises(ChannelError, match=says):
            check_storages(storages_, nfds, streamed, limit)
    assert check_view((0, torch.float32, (2, 2), (2, 1), 0), storages) == (0, torch.float32, (2, 2), (2, 1), 0)
    with pytest.raises(ChannelError, match="reaches past its storage"):
        check_view((0, torch.float32, (2, 2), (2, 1), 1), storages)
    with pytest.raises(ChannelError, match="view of dtype"):
        check_view((0, "float32", (2,), (1,), 0), storages)
    with pytest.raises(ChannelError, match="names storage 2"):
        check_view((2, torch.float32, (1,), (1,), 0), storages)


def test_what_comes_back_is_rebuilt_or_refused() -> None:
    tensor = torch.zeros(3)
    substitution = Substitution([tensor])
    assert substitution.rebuild({"x": [(MARK, 0)]})["x"][0] is tensor and substitution.used == {0}
    with pytest.raises(ChannelError, match="bad marker"):
        Substitution([tensor]).rebuild((MARK, 5))
    loop: list = []
    loop.append(loop)
    with pytest.raises(ChannelError, match="cycle"):
        Substitution([]).rebuild(loop)
    with pytest.raises(ChannelError, match="does not load"):
        load_skeleton(bytearray(b"not a pickle"))
    buffer = io.BytesIO()
    torch.save({"format": FORMAT}, buffer)
    with pytest.raises(ChannelError, match="not \\(format, tree, views, storages\\)"):
        load_skeleton(bytearray(buffer.getvalue()))
