"""The socket channel between grader and worker: round trips through a real second process, deadlines,
dead peers, and hostile peers writing hand-crafted frames on the socket.

A round trip goes to an echo process (a fresh interpreter given its end of the socket, which sends back
every message it receives) and back, so each tensor crosses two processes twice; every case runs with
both bulk carriers, once with `bulk_threshold=0` (every CPU tensor goes outside the pickle, 0-dim and
empty ones too) and once with the default threshold (small tensors stay in the pickle).
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import io
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from grader.running.worker.channel import (
    BULK_DTYPES,
    FORMAT,
    MAGIC,
    MARK,
    Channel,
    ChannelClosed,
    ChannelError,
    ChannelTimeout,
)

ROOT = Path(__file__).resolve().parents[3]
HEADER = struct.Struct("<4sIQQ")
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL
MiB = 1 << 20


# ---------------------------------------------------------------------- comparing trees


def assert_trees_equal(got: Any, want: Any, path: str = "message") -> None:
    """Fail naming the first place where `got` differs from `want`: container type, keys, length, or for
    a tensor its type, dtype, shape, stride, storage offset or values (torch.equal and bit for bit; the
    message gives how many elements differ and the first of them)."""
    assert type(got) is type(want), f"{path}: {type(got).__name__} where {type(want).__name__} was sent"
    if isinstance(want, torch.Tensor):
        where = f"{path} ({want.dtype}, {tuple(want.shape)})"
        assert got.dtype == want.dtype, f"{where}: arrived as {got.dtype}"
        assert got.shape == want.shape, f"{where}: arrived with shape {tuple(got.shape)}"
        assert got.stride() == want.stride(), f"{where}: stride {got.stride()}, sent {want.stride()}"
        assert got.storage_offset() == want.storage_offset(), f"{where}: storage offset {got.storage_offset()}"
        assert got.requires_grad == want.requires_grad, f"{where}: requires_grad {got.requires_grad}"
        if want.device.type == "meta":
            return
        got_bits = got.detach().reshape(-1).view(torch.uint8).reshape(want.numel(), want.element_size())
        want_bits = want.detach().reshape(-1).view(torch.uint8).reshape(want.numel(), want.element_size())
        differs = (got_bits != want_bits).any(dim=1)
        if differs.any() or not torch.equal(got.detach(), want.detach()):
            first = int(differs.nonzero()[0, 0]) if differs.any() else 0
            index = tuple(int(i) for i in torch.unravel_index(torch.tensor(first), want.shape)) if want.dim() else ()
            raise AssertionError(f"{where}: {int(differs.sum())} of {want.numel()} elements differ, the first at "
                                 f"{index}: {got.reshape(-1)[first].item()!r} where {want.reshape(-1)[first].item()!r}"
                                 " was sent")
    elif isinstance(want, dict):
        assert list(got) == list(want), f"{path}: keys {list(got)!r:.200}, sent {list(want)!r:.200}"
        for key in want:
            assert_trees_equal(got[key], want[key], f"{path}[{key!r}]")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), f"{path}: {len(got)} items, sent {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_trees_equal(g, w, f"{path}[{i}]")
    else:
        assert got == want, f"{path}: {got!r:.100} where {want!r:.100} was sent"


def test_assert_trees_equal_passes_equal_trees() -> None:
    x = torch.arange(12.0).reshape(3, 4)
    assert_trees_equal({"a": [x.t(), (1, "s", b"b")], "n": None}, {"a": [x.t().clone().t().t(), (1, "s", b"b")],
                                                                    "n": None})


@pytest.mark.parametrize(("got", "want", "says"), [
    (torch.zeros(3), torch.zeros(3, dtype=torch.float64), "arrived as torch.float32"),
    (torch.zeros(3), torch.zeros(1, 3), "arrived with shape (3,)"),
    (torch.zeros(3, 2).t(), torch.zeros(2, 3), "stride (1, 2), sent (3, 1)"),
    (torch.zeros(4)[1:], torch.zeros(3), "storage offset 1"),
    (torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0.0, 1.5, 2.5]), "2 of 3 elements differ, the first at (1,): 1.0"),
    (torch.tensor([-0.0]), torch.tensor([0.0]), "1 of 1 elements differ"),  # equal, but not bit for bit
    (torch.tensor(1), torch.tensor(2), "1 of 1 elements differ, the first at (): 1"),
    ({"a": 1}, {"b": 1}, "keys ['a']"),
    ([1, 2], [1, 2, 3], "2 items, sent 3"),
    ((1,), [1], "tuple where list was sent"),
    ({"a": [torch.ones(2)]}, {"a": [torch.zeros(2)]}, "message['a'][0]"),
])
def test_assert_trees_equal_names_the_difference(got: Any, want: Any, says: str) -> None:
    with pytest.raises(AssertionError) as raised:
        assert_trees_equal(got, want)
    assert says in str(raised.value)


# ---------------------------------------------------------------------- a second process

ECHO = textwrap.dedent("""
    import socket, sys
    from grader.running.worker.channel import Channel, ChannelClosed
    fd, threshold, carrier = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    channel = Channel(socket.socket(fileno=fd), bulk_threshold=threshold, bulk_carrier=carrier)
    while True:
        try:
            message = channel.receive()
        except ChannelClosed:
            break
        channel.send(message)
""")


def python(code: str, *args: str, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", code, *args], pass_fds=pass_fds, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module", params=[("stream", 0), ("memfd", 0), ("stream", MiB), ("memfd", MiB)],
                ids=lambda p: f"{p[0]}-threshold{p[1]}")
def echo(request: pytest.FixtureRequest) -> Iterator[Channel]:
    carrier, threshold = request.param
    mine, theirs = Channel.pair(bulk_threshold=threshold, bulk_carrier=carrier)
    sock = theirs.detach_socket()
    process = python(ECHO, str(sock.fileno()), str(threshold), carrier, pass_fds=(sock.fileno(),))
    sock.close()
    yield mine
    mine.close()
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output


def round_trip(channel: Channel, message: Any) -> Any:
    channel.send(message, timeout=60)
    return channel.receive(timeout=60)


# ---------------------------------------------------------------------- round trips


def make(dtype: torch.dtype, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=generator).to(dtype)
    if dtype == torch.bool:
        return torch.randn(shape, generator=generator) > 0
    low = 0 if dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64) else -100
    return torch.randint(low, 100, shape, generator=generator).to(dtype)


SHAPES = [(), (0,), (5, 0, 2), (1, 1, 1023), (3, 7, 256), (64, 33)]


@pytest.mark.parametrize("dtype", sorted(BULK_DTYPES, key=str), ids=str)
def test_every_dtype_and_shape_round_trips(echo: Channel, dtype: torch.dtype) -> None:
    message = {"tensors": [make(dtype, shape, seed) for seed, shape in enumerate(SHAPES)]}
    assert_trees_equal(round_trip(echo, message), message)


def test_large_tensors_of_several_dtypes_round_trip(echo: Channel) -> None:
    message = {
        "x": make(torch.float32, (1024, 1031)),  # 4 MiB: received into a huge-page mapping
        "b": make(torch.bfloat16, (3, 1 << 19)),
        "mask": make(torch.bool, (2 * MiB + 3,)),
        "index": make(torch.int64, (MiB // 4,)),
        "small": make(torch.float16, (7, 9)),
    }
    assert_trees_equal(round_trip(echo, message), message)


def test_nested_message_with_small_and_big_tensors(echo: Channel) -> None:
    big = make(torch.float32, (600, 1000), seed=1)
    message = {
        "ok": True, "id": 17, "ratio": 0.25, "name": "matmul", "raw": b"\x00\xff", "none": None,
        "cases": [{"inputs": (big, make(torch.int32, (3,))), "meta": {"shape": [600, 1000]}}, ()],
        "ordered": collections.OrderedDict([("z", big[:10]), ("a", 1)]),
        "size": torch.Size([2, 3]),
    }
    got = round_trip(echo, message)
    assert_trees_equal(got, message)
    assert type(got["ordered"]) is collections.OrderedDict


def test_strides_offsets_and_sharing_survive(echo: Channel) -> None:
    base = make(torch.float32, (512, 640), seed=2)  # 1.25 MiB: above the default threshold
    message = {
        "base": base, "t": base.t(), "every_other": base[::2, 1::3], "tail": base[100:], "row": base[7],
        "expanded": base[0].expand(4, 640), "again": base,
        "separate": make(torch.float64, (300, 700), seed=3).t(),
    }
    got = round_trip(echo, message)
    assert_trees_equal(got, message)
    assert got["again"] is got["base"]
    storage = got["base"].untyped_storage().data_ptr()
    assert all(got[k].untyped_storage().data_ptr() == storage for k in ("t", "every_other", "tail", "row"))
    got["base"][7, 0] = 123.0  # views of one storage arrive as views of one storage
    assert got["row"][0] == 123.0 and got["t"][0, 7] == 123.0


def test_tensors_the_channel_leaves_in_the_pickle_arrive_as_today(echo: Channel) -> None:
    big = make(torch.float32, (512, 1024), seed=4)
    message = {
        "parameter": torch.nn.Parameter(big.clone()),
        "grad": big.clone().requires_grad_(),
        "meta": torch.empty(512, 1024, device="meta"),
        "plain": big,
    }
    got = round_trip(echo, message)
    assert_trees_equal(got, message)
    assert type(got["parameter"]) is torch.nn.Parameter


def test_a_tuple_that_looks_like_a_marker_is_not_taken_for_one(echo: Channel) -> None:
    message = {"fake": (MARK, 0), "big": make(torch.float32, (MiB,)), "short": (MARK,)}
    assert_trees_equal(round_trip(echo, message), message)


def test_a_cycle_is_sent_whole() -> None:
    left, right = Channel.pair(bulk_threshold=0)
    with left, right:
        cycle: list[Any] = [torch.arange(6)]
        cycle.append(cycle)
        left.send(cycle)
        got = right.receive(5)
    assert got[1] is got and torch.equal(got[0], torch.arange(6))


def test_big_tensors_travel_outside_the_skeleton() -> None:
    """The header that `send` writes: a 16 MiB tensor takes a few hundred bytes of skeleton, its bytes are
    streamed after it, or passed as one sealed memfd."""
    tensor = make(torch.float32, (4 * MiB,))
    for carrier in ("stream", "memfd"):
        sender, raw = Channel.pair(bulk_carrier=carrier)
        sock = raw.detach_socket()
        with sender, sock:
            thread = threading.Thread(target=sender.send, args=({"x": tensor},))
            thread.start()
            fds: list[int] = []
            head, fds, _, _ = socket.recv_fds(sock, HEADER.size, 4)
            magic, nfds, skeleton, streamed = HEADER.unpack(head)
            remaining = skeleton + streamed
            while remaining:
                remaining -= len(sock.recv(min(remaining, MiB)))
            thread.join()
            try:
                assert (magic, skeleton < 4096) == (MAGIC, True)
                if carrier == "stream":
                    assert (nfds, fds, streamed) == (0, [], 16 * MiB)
                else:
                    assert (nfds, len(fds), streamed) == (1, 1, 0)
                    assert os.fstat(fds[0]).st_size == 16 * MiB
                    assert fcntl.fcntl(fds[0], fcntl.F_GET_SEALS) & SEALS == SEALS
            finally:
                for fd in fds:
                    os.close(fd)


def test_more_storages_than_max_fds_are_streamed() -> None:
    left, right = Channel.pair(bulk_threshold=0, bulk_carrier="memfd", max_fds=2)
    with left, right:
        message = [torch.full((n,), float(n)) for n in range(1, 6)]
        left.send(message)
        assert_trees_equal(right.receive(5), message)


def test_a_socket_handed_to_a_child_keeps_working() -> None:
    mine, theirs = Channel.pair()
    sock = theirs.detach_socket()
    with pytest.raises(ChannelClosed):
        theirs.fileno()
    code = textwrap.dedent("""
        import socket, sys, torch
        from grader.running.worker.channel import Channel
        with Channel(socket.socket(fileno=int(sys.argv[1]))) as channel:
            channel.send({"pid": 1, "x": torch.ones(3 * 1024 * 1024, dtype=torch.uint8)})
    """)
    process = python(code, str(sock.fileno()), pass_fds=(sock.fileno(),))
    sock.close()
    with mine:
        got = mine.receive(60)
        assert torch.equal(got["x"], torch.ones(3 * MiB, dtype=torch.uint8))
        with pytest.raises(ChannelClosed):
            mine.receive(60)
    assert process.wait(60) == 0


# ---------------------------------------------------------------------- deadlines and dead peers


def test_timeout_with_nothing_sent_leaves_the_channel_usable() -> None:
    left, right = Channel.pair()
    with left, right:
        started = time.monotonic()
        with pytest.raises(ChannelTimeout):
            right.receive(timeout=0.2)
        assert 0.15 < time.monotonic() - started < 2
        left.send({"after": 1})
        assert right.receive(1) == {"after": 1}


def test_the_deadline_covers_the_whole_message() -> None:
    """A peer dribbling its message a byte every 20 ms never makes one wait long, but the message is
    not complete after 0.5 s; the channel is unusable afterwards (its framing is lost)."""
    frame = encode_frame((FORMAT, {"x": 1}, [], []))
    left, right = socket.socketpair()
    channel = Channel(right)
    stop = threading.Event()

    def dribble() -> None:
        for byte in frame:
            if stop.wait(0.02):
                return
            left.send(bytes([byte]))

    thread = threading.Thread(target=dribble)
    thread.start()
    try:
        started = time.monotonic()
        with pytest.raises(ChannelTimeout):
            channel.receive(timeout=0.5)
        assert 0.45 < time.monotonic() - started < 2
    finally:
        stop.set()
        thread.join()
    with left, channel, pytest.raises(ChannelError, match="part way"):
        channel.receive(1)


def test_peer_closing_raises_channel_closed() -> None:
    left, right = Channel.pair()
    left.close()
    with right, pytest.raises(ChannelClosed) as raised:
        right.receive(1)
    assert type(raised.value) is ChannelClosed


def test_peer_dying_mid_message_raises_channel_closed() -> None:
    mine, theirs = Channel.pair()
    sock = theirs.detach_socket()
    code = textwrap.dedent("""
        import os, socket, struct, sys
        sock = socket.socket(fileno=int(sys.argv[1]))
        sock.sendall(struct.pack("<4sIQQ", b"KGC1", 0, 1000, 0) + b"x" * 10)
        os.kill(os.getpid(), 9)
    """)
    process = python(code, str(sock.fileno()), pass_fds=(sock.fileno(),))
    sock.close()
    with mine, pytest.raises(ChannelClosed, match="middle of a message") as raised:
        mine.receive(60)
    assert type(raised.value) is ChannelClosed
    assert process.wait(60) == -signal.SIGKILL


def test_sending_to_a_dead_peer_raises_channel_closed_not_sigpipe() -> None:
    """In a process where SIGPIPE kills (as in a child that reset its signals), sending to a closed peer
    raises ChannelClosed, for a small and for a streamed message."""
    code = textwrap.dedent("""
        import signal, torch
        from grader.running.worker.channel import Channel, ChannelClosed
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        for message in ({"small": 1}, {"big": torch.zeros(4 << 20)}):
            left, right = Channel.pair()
            right.close()
            try:
                left.send(message)
            except ChannelClosed as exc:
                print("ChannelClosed", exc)
    """)
    process = python(code)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert output.count("ChannelClosed") == 2, output


def test_a_peer_that_stops_reading_makes_send_time_out() -> None:
    left, right = Channel.pair()
    with left, right:
        with pytest.raises(ChannelTimeout):
            left.send({"x": torch.zeros(16 * MiB, dtype=torch.uint8)}, timeout=0.3)
        with pytest.raises(ChannelError, match="part way"):
            left.send({"small": 1})


def test_limits_are_checked_before_anything_is_sent() -> None:
    left, right = Channel.pair(max_message_bytes=2000, max_bulk_bytes=MiB)
    with left, right:
        with pytest.raises(ValueError, match="max_message_bytes"):
            left.send({"text": "x" * 5000})
        with pytest.raises(ValueError, match="max_bulk_bytes"):
            left.send({"x": torch.zeros(2 * MiB, dtype=torch.uint8)})
        left.send({"still": "fine"})
        assert right.receive(1) == {"still": "fine"}


def test_no_descriptor_leaks_over_many_messages() -> None:
    left, right = Channel.pair(bulk_threshold=0, bulk_carrier="memfd")
    message = {"a": torch.arange(10), "b": [torch.ones(3, 3), torch.tensor(True)]}
    with left, right:
        for _ in range(3):
            left.send(message)
            right.receive(5)
        before = open_fds()
        for _ in range(300):
            left.send(message)
            assert_trees_equal(right.receive(5), message)
        assert new_fds(before) == {}


# ---------------------------------------------------------------------- hostile peers


def open_fds() -> dict[int, str]:
    """This process's open descriptors and what each one is (a number can be reused by something else)."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the descriptor listdir itself used is gone
            found[int(name)] = os.readlink(f"/proc/self/fd/{name}")
    return found


def new_fds(before: dict[int, str]) -> dict[int, str]:
    return {fd: what for fd, what in open_fds().items() if before.get(fd) != what}


def encode_frame(skeleton: Any, *, nfds: int = 0, streamed: bytes = b"", magic: bytes = MAGIC,
                 skeleton_length: int | None = None, streamed_length: int | None = None) -> bytes:
    """A frame as `send` writes it, with every field open to tampering."""
    buffer = io.BytesIO()
    torch.save(skeleton, buffer)
    payload = buffer.getvalue()
    length = len(payload) if skeleton_length is None else skeleton_length
    streamed_size = len(streamed) if streamed_length is None else streamed_length
    return HEADER.pack(magic, nfds, length, streamed_size) + payload + streamed


def sealed_memfd(data: bytes, seals: int = SEALS) -> int:
    fd = os.memfd_create("hostile", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def hostile(write: Callable[[socket.socket], None], **options: Any) -> ChannelClosed:
    """What the receiving channel raised for the bytes and descriptors `write` put on the socket; checks
    that receiving left no descriptor open."""
    before = open_fds()
    peer, mine = socket.socketpair()
    channel = Channel(mine, **options)
    try:
        with peer:
            write(peer)
            with pytest.raises(ChannelClosed) as raised:
                channel.receive(timeout=2)
            left_open = new_fds(before).keys() - {peer.fileno(), mine.fileno()}
            assert not left_open, f"received descriptors left open: {new_fds(before)}"
    finally:
        channel.close()
    assert new_fds(before) == {}
    return raised.value


def send_with_fds(data: bytes, make_fds: Callable[[], list[int]]) -> Callable[[socket.socket], None]:
    """Write `data`, passing the descriptors `make_fds` opens on its first byte (then closing them)."""
    def write(peer: socket.socket) -> None:
        fds = make_fds()
        try:
            if fds:
                socket.send_fds(peer, [data[:HEADER.size]], fds)
                peer.sendall(data[HEADER.size:])
            else:
                peer.sendall(data)
        finally:
            for fd in fds:
                os.close(fd)
    return write


def pipe_read_end() -> int:
    read_end, write_end = os.pipe()
    os.close(write_end)
    return read_end


def one_storage(nbytes: int, carrier: int = 1, view: Any = None) -> tuple[Any, ...]:
    view = (0, torch.uint8, (nbytes,), (1,), 0) if view is None else view
    return (FORMAT, {"x": (MARK, 0)}, [view], [(carrier, nbytes)])


def test_a_well_formed_hand_made_frame_is_accepted() -> None:
    """The frames below are wrong in one place each; this one, built the same way, is right."""
    left, right = socket.socketpair()
    with left, Channel(right) as channel:
        send_with_fds(encode_frame(one_storage(5), nfds=1), lambda: [sealed_memfd(b"hello")])(left)
        assert channel.receive(2)["x"].numpy().tobytes() == b"hello"
        left.sendall(encode_frame(one_storage(3, carrier=0), streamed=b"abc"))
        assert channel.receive(2)["x"].numpy().tobytes() == b"abc"


@pytest.mark.parametrize(("frame", "fds", "says"), [
    (lambda: encode_frame(one_storage(5), nfds=1), lambda: [], "1 descriptors announced, 0 received"),
    (lambda: encode_frame((FORMAT, {}, [], [])), lambda: [sealed_memfd(b"hello")], "0 descriptors announced, 1"),
    (lambda: encode_frame(one_storage(5), nfds=2), lambda: [sealed_memfd(b"hello"), sealed_memfd(b"x")],
     "do not use the 2 descriptors"),
    (lambda: encode_frame(one_storage(1 << 37), nfds=1), lambda: [sealed_memfd(b"hello")], "over max_bulk_bytes"),
    (lambda: encode_frame(one_storage(9), nfds=1), lambda: [sealed_memfd(b"hello")], "holds 5 bytes"),
    (lambda: encode_frame(one_storage(5), nfds=1), lambda: [sealed_memfd(b"hello", seals=0)], "not a memfd sealed"),
    (lambda: encode_frame(one_storage(5), nfds=1),
     lambda: [sealed_memfd(b"hello", seals=fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)], "not a memfd sealed"),
    (lambda: encode_frame(one_storage(5), nfds=1), lambda: [os.open("/dev/null", os.O_RDONLY)], "not a memfd"),
    (lambda: encode_frame(one_storage(5), nfds=1), lambda: [pipe_read_end()], "not a memfd"),
    (lambda: encode_frame(one_storage(1 << 20), nfds=1), lambda: [sparse_memfd(1 << 20)], "has only 0 written"),
    (lambda: encode_frame(one_storage(5, view=(1, torch.uint8, (5,), (1,), 0)), nfds=1),
     lambda: [sealed_memfd(b"hello")], "names storage 1 of 1"),
    (lambda: encode_frame((FORMAT, {"x": (MARK, 3)}, [(0, torch.uint8, (5,), (1,), 0)], [(1, 5)]), nfds=1),
     lambda: [sealed_memfd(b"hello")], "bad marker"),
    (lambda: encode_frame((FORMAT, {"x": 1}, [(0, torch.uint8, (5,), (1,), 0)], [(1, 5)]), nfds=1),
     lambda: [sealed_memfd(b"hello")], "views [0] are never used"),
    (lambda: encode_frame((FORMAT, {"x": 1}, [], [(1, 5)]), nfds=1), lambda: [sealed_memfd(b"hello")],
     "storages [0] are never used"),
])
def test_descriptor_and_placeholder_mismatches_are_channel_errors(frame: Any, fds: Any, says: str) -> None:
    error = hostile(send_with_fds(frame(), fds))
    assert isinstance(error, ChannelError) and says in str(error), error


def sparse_memfd(size: int) -> int:
    fd = os.memfd_create("sparse", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    return fd


@pytest.mark.parametrize(("view", "says"), [
    ((0, torch.float32, (2,), (1,), 0), "reaches past its storage"),  # 8 bytes of a 5-byte storage
    ((0, torch.uint8, (2, 3), (3, 1), 0), "reaches past"),
    ((0, torch.uint8, (2,), (4,), 1), "reaches past"),
    ((0, torch.uint8, (0,), (1,), 6), "reaches past"),
    ((0, torch.uint8, (5,), (-1,), 0), "bad view geometry"),
    ((0, torch.uint8, (True,), (1,), 0), "bad view geometry"),
    ((0, torch.uint8, (5,), (1, 1), 0), "bad view geometry"),
    ((0, torch.uint8, (1 << 63,), (1,), 0), "bad view geometry"),
    ((0, "uint8", (5,), (1,), 0), "of dtype"),
    ((0, [torch.uint8], (5,), (1,), 0), "of dtype"),  # unhashable
    ((0, torch.complex32, (1,), (1,), 0), "of dtype"),
    ((torch.tensor([0, 0]), torch.uint8, (5,), (1,), 0), "names storage"),
    ((0, torch.uint8, (5,)), "bad view entry"),
])
def test_views_that_do_not_fit_their_storage_are_channel_errors(view: Any, says: str) -> None:
    error = hostile(send_with_fds(encode_frame(one_storage(5, view=view), nfds=1), lambda: [sealed_memfd(b"hello")]))
    assert isinstance(error, ChannelError) and says in str(error), error


class Exploit:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.getpid, ())


@pytest.mark.parametrize(("frame", "says"), [
    (lambda: encode_frame((FORMAT, {}, [], []), magic=b"HTTP"), "bad magic"),
    (lambda: encode_frame((FORMAT, {}, [], []), skeleton_length=1 << 40), "skeleton of 1099511627776 bytes"),
    (lambda: encode_frame((FORMAT, {}, [], []), skeleton_length=0), "skeleton of 0 bytes"),
    (lambda: encode_frame((FORMAT, {}, [], []), streamed_length=1 << 40), "over max_bulk_bytes"),
    (lambda: encode_frame((FORMAT, {}, [], []), nfds=65), "65 descriptors announced, over max_fds=64"),
    (lambda: HEADER.pack(MAGIC, 0, 20, 0) + b"not a torch.save zip", "does not load"),
    (lambda: encode_frame((FORMAT, Exploit(), [], [])), "does not load"),
    (lambda: encode_frame({"kind": "not a skeleton"}), "is not (format, tree, views, storages)"),
    (lambda: encode_frame((torch.ones(3), {}, [], [])), "is not (format, tree, views, storages)"),
    (lambda: encode_frame((2, {}, [], [])), "is not (format, tree, views, storages)"),
    (lambda: encode_frame((FORMAT, {}, [], [(0, 5)]), streamed=b"hello" * 2), "do not add up to the 10 bytes"),
    (lambda: encode_frame((FORMAT, {}, [], [(torch.ones(2), 5)])), "bad storage entry"),
    (lambda: encode_frame((FORMAT, {}, [], [(0, -5)])), "bad storage entry"),
    (lambda: nested_markers(3000), "nested too deeply"),
])
def test_malformed_frames_are_channel_errors(frame: Callable[[], bytes], says: str) -> None:
    error = hostile(lambda peer: peer.sendall(frame()))
    assert isinstance(error, ChannelError) and says in str(error), error


def nested_markers(depth: int) -> bytes:
    """A frame whose marker sits `depth` lists down: the pickler manages it (given a higher recursion limit
    while saving), a recursive walk does not."""
    tree: Any = (MARK, 0)
    for _ in range(depth):
        tree = [tree]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(4 * depth)
    try:
        return encode_frame((FORMAT, tree, [(0, torch.uint8, (1,), (1,), 0)], [(0, 1)]), streamed=b"x")
    finally:
        sys.setrecursionlimit(limit)


def test_a_cycle_from_a_hostile_peer_is_a_channel_error() -> None:
    cycle: list[Any] = [(MARK, 0)]
    cycle.append(cycle)
    frame = encode_frame((FORMAT, cycle, [(0, torch.uint8, (1,), (1,), 0)], [(0, 1)]), streamed=b"x")
    error = hostile(lambda peer: peer.sendall(frame))
    assert isinstance(error, ChannelError) and "cycle" in str(error)


def test_shared_subtrees_are_rebuilt_once() -> None:
    """Sixty levels of lists each holding the next one twice: 2**60 paths, 60 lists."""
    tree: Any = (MARK, 0)
    for _ in range(60):
        tree = [tree, tree]
    left, right = socket.socketpair()
    with left, Channel(right) as channel:
        left.sendall(encode_frame((FORMAT, tree, [(0, torch.uint8, (1,), (1,), 0)], [(0, 1)]), streamed=b"x"))
        got = channel.receive(5)
    for _ in range(60):
        assert got[0] is got[1]
        got = got[0]
    assert got.numpy().tobytes() == b"x"


@pytest.mark.parametrize("announced", [0, 70])
def test_more_descriptors_than_max_fds_are_all_closed(announced: int) -> None:
    frame = encode_frame((FORMAT, {}, [], [(1, 1)] * announced), nfds=announced)
    error = hostile(send_with_fds(frame, lambda: [sealed_memfd(b"x") for _ in range(70)]))
    assert isinstance(error, ChannelError) and "more than max_fds=64 descriptors" in str(error), error


def test_descriptors_nobody_announced_are_channel_errors() -> None:
    frame = encode_frame((FORMAT, {}, [], []), nfds=0)
    error = hostile(send_with_fds(frame, lambda: [sealed_memfd(b"x") for _ in range(10)]))
    assert isinstance(error, ChannelError) and "0 descriptors announced, 10 received" in str(error), error


def test_descriptors_sent_with_the_skeleton_are_counted_and_closed() -> None:
    frame = encode_frame(one_storage(5), nfds=1)

    def write(peer: socket.socket) -> None:
        fds = [sealed_memfd(b"hello"), sealed_memfd(b"hello")]
        socket.send_fds(peer, [frame[:HEADER.size]], fds[:1])
        socket.send_fds(peer, [frame[HEADER.size:HEADER.size + 4]], fds[1:])
        peer.sendall(frame[HEADER.size + 4:])
        for fd in fds:
            os.close(fd)

    error = hostile(write)
    assert isinstance(error, ChannelError) and "1 descriptors announced, 2 received" in str(error)


def test_a_channel_error_makes_the_channel_unusable() -> None:
    left, right = socket.socketpair()
    with left, Channel(right) as channel:
        left.sendall(encode_frame((FORMAT, {}, [], []), magic=b"XXXX"))
        left.sendall(encode_frame((FORMAT, {"fine": 1}, [], [])))
        with pytest.raises(ChannelError, match="bad magic"):
            channel.receive(2)
        with pytest.raises(ChannelError, match="malformed"):
            channel.receive(2)


def test_an_announced_huge_skeleton_costs_nothing_until_it_arrives() -> None:
    left, right = socket.socketpair()
    with left, Channel(right) as channel:
        left.sendall(HEADER.pack(MAGIC, 0, (1 << 31) - 1, 0) + b"PK")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with pytest.raises(ChannelTimeout):
            channel.receive(timeout=0.3)
        assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024  # KiB


TRUNCATING_RECEIVER = textwrap.dedent("""
    import socket, sys
    from grader.running.worker.channel import Channel, ChannelError
    channel = Channel(socket.socket(fileno=int(sys.argv[1])))
    print("ready", flush=True)
    try:
        message = channel.receive(timeout=30)
    except ChannelError as exc:
        print("ChannelError:", exc)
    else:
        print("received", {k: v.sum().item() for k, v in message.items()})
""")


@pytest.mark.parametrize("seals", [0, fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE], ids=["unsealed", "shrinkable"])
def test_a_memfd_truncated_after_sending_does_not_crash_the_receiver(seals: int) -> None:
    """The peer keeps its own descriptor of the memfd and truncates it to nothing once it is sent. A
    receiver that mapped it would die of SIGBUS on reading; this one, in its own process, refuses it
    (it is not sealed against shrinking) and exits normally."""
    mine, theirs = socket.socketpair()
    process = python(TRUNCATING_RECEIVER, str(theirs.fileno()), pass_fds=(theirs.fileno(),))
    theirs.close()
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    size = 64 * MiB
    fd = os.memfd_create("shrinking", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    with mine, contextlib.closing(io.FileIO(fd, "r+")) as memfd:
        os.posix_fallocate(fd, 0, size)
        os.pwrite(fd, b"\x01" * MiB, 0)
        if seals:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        frame = encode_frame(one_storage(size), nfds=1)
        socket.send_fds(mine, [frame[:HEADER.size]], [fd])
        mine.sendall(frame[HEADER.size:])
        memfd.truncate(0)
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert "ChannelError: a passed descriptor is not a memfd sealed against shrinking" in output, output


def test_received_descriptors_are_close_on_exec() -> None:
    """A descriptor is open in the receiving process only while it is read, and never inherited by a
    child started meanwhile: seen from the inside, by wrapping the reader."""
    from grader.running.worker import channel as module

    seen: list[int] = []
    original = module._read_memfd

    def spy(fd: int, nbytes: int, into: memoryview) -> None:
        seen.append(fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC)
        original(fd, nbytes, into)

    left, right = Channel.pair(bulk_threshold=0, bulk_carrier="memfd")
    with left, right, pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "_read_memfd", spy)
        left.send([torch.ones(3), torch.zeros(2)])
        right.receive(2)
    assert seen == [fcntl.FD_CLOEXEC, fcntl.FD_CLOEXEC]
