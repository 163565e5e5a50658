"""Messages between the grader and its worker over a Unix stream socket, large CPU tensors outside the pickle.

A message is a tree of dicts, lists, tuples, scalars, strings, bytes and tensors (grader.running.protocol's
messages, encoded). The tree goes as a `torch.save` "skeleton", loaded with `weights_only=True`; but every CPU tensor
whose storage holds at least `bulk_threshold` bytes is replaced in it by a marker, and that storage's raw
bytes travel beside the skeleton (the framing and its checks: grader.running.worker.channel_frames):

    header    struct "<4sIQQ": magic b"KGC1", descriptor count, skeleton length, streamed bulk length
    skeleton  torch.save((1, tree, views, storages))
                views:    [(storage index, dtype, shape, stride, storage offset), ...]
                storages: [(carrier, nbytes), ...]   carrier 0: bytes streamed, 1: a sealed memfd
              a marker in the tree is the tuple (MARK, view index)
    bulk      the bytes of the streamed storages, in table order, right after the skeleton
    fds       SCM_RIGHTS on the header's first byte: one memfd per memfd storage, in table order

Strides, storage offsets and sharing are kept: the whole storage travels (as `torch.save` writes it),
views of one storage arrive as views of one storage, and one tensor object sent twice arrives as one
object. What is not a plain CPU tensor (a subclass such as `nn.Parameter`, `requires_grad`, conjugate or
negative bits, another device, a dtype outside `BULK_DTYPES`), a tensor inside a container other than a
dict, list, tuple or OrderedDict, and a tensor used as a dict key stay in the skeleton, as today. If the
message holds a tuple that starts with MARK itself, or a cycle, nothing is taken out of it.

Two carriers (`bulk_carrier`): "stream" (the default) writes the bytes on the socket after the skeleton
and the receiver reads them straight into the new storage; "memfd" copies each storage into an anonymous
memfd (`MFD_CLOEXEC`), seals it (shrink, grow, write, seal) and passes the descriptor. Memfds were
the first design; they are kept, but not the default, because filling a fresh memfd means allocating its
pages one by one, and on the 2-core VM used here that alone costs more than streaming the same bytes
through the socket (numbers below). A memfd send does not wait for the peer to read it; a streamed send
does, so give `send` a timeout when the peer may stop reading. Storages of 4 MiB or more are received
into an anonymous mapping advised `MADV_HUGEPAGE` (owned by the tensor: its storage cannot be resized);
smaller ones into `torch.empty`. Configure both ends alike (a sender puts up to its own `max_fds`
storages in memfds). One thread may send while another receives; two senders, or two receivers, at once
are not supported.

Receiving trusts nothing (the worker runs student code and can write anything on its socket): the
skeleton is loaded with `weights_only=True`; sizes are checked against `max_message_bytes`,
`max_bulk_bytes` and `max_fds` before anything is allocated; every view is checked to lie inside its
storage before a tensor is built on it; every storage and every view must be used; at most `max_fds`
descriptors are taken (`MSG_CMSG_CLOEXEC`) and every one is closed on every path. A memfd is never
mapped: it must be a regular file of exactly the announced size, sealed against shrinking, growing and
writing, with its pages written (a sparse file would make the receiver allocate memory the sender never
paid for), and it is copied with `os.preadv`, which must return exactly its size. Anything else raises
`ChannelError`, a `ChannelClosed`: callers treat a malformed message like a dead worker. One timeout
covers the header, the skeleton, the descriptors and the streamed bytes; copying out of sealed memfds
never waits on the peer. After an error, or a timeout once part of a message was read or written, the
stream has lost its framing and every later call raises `ChannelError`.

One float32 tensor sent and received between two processes, median of 5 in seconds, two runs (run 1 /
run 2) on the 2-core development VM under a load average of about 5 from other work (raw output with
the ranges, and the page costs behind the memfd numbers: docs/channel-throughput-vm.txt):

    PYTHONPATH=. python benchmarks/channel_throughput.py --sizes 1 64 256 --repeats 5

    size     direction       first framing, pipes     stream          memfd
    1 MiB    parent->child   0.002 / 0.005            0.002 / 0.002   0.008 / 0.010
    1 MiB    child->parent   0.002 / 0.003            0.001 / 0.001   0.007 / 0.008
    64 MiB   parent->child   0.209 / 0.492            0.017 / 0.017   0.096 / 0.190
    64 MiB   child->parent   0.202 / 0.448            0.017 / 0.017   0.142 / 0.117
    256 MiB  parent->child   2.052 / 1.243            0.129 / 0.228   0.281 / 0.689
    256 MiB  child->parent   1.076 / 0.799            0.082 / 0.203   0.230 / 0.525

Here a fresh 4 KiB page costs about 4 us to allocate: filling a 256 MiB memfd takes about 0.3 s before
the receiver reads anything, while streaming needs no new pages on the sending side and huge pages on
the receiving one. A host with cheaper page faults may rank the carriers differently; run the
benchmark there before choosing.
"""

from __future__ import annotations

import array
import fcntl
import math
import mmap
import os
import select
import socket
import stat
import struct
import time
from typing import Any, Literal

import torch

from grader.running.worker.channel_frames import (
    BULK_DTYPES,
    FORMAT,
    MAGIC,
    MARK,
    MEMFD,
    STREAM,
    ChannelClosed,
    ChannelError,
    ChannelTimeout,
    Substitution,
    check_storages,
    check_view,
    encode_frame,
    load_skeleton,
)

__all__ = ["BULK_DTYPES", "FORMAT", "MAGIC", "MARK", "Channel", "ChannelClosed", "ChannelError", "ChannelTimeout"]


_HEADER = struct.Struct("<4sIQQ")
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
_SCM_MAX_FD = 253  # the kernel's limit of descriptors in one message
_HUGE_BYTES = 4 << 20
_GROW_BYTES = 16 << 20
_IO_CHUNK = 1 << 30  # below the kernel's 2 GiB limit on one read or write

Carrier = Literal["stream", "memfd"]


class Channel:
    """One end of a framed, bidirectional message stream over a connected `AF_UNIX` `SOCK_STREAM` socket.
    The channel owns the socket (it is put in blocking mode; waiting is done with poll)."""

    def __init__(self, sock: socket.socket, *, bulk_threshold: int = 1 << 20, max_message_bytes: int = 1 << 31,
                 max_bulk_bytes: int = 1 << 36, max_fds: int = 64, bulk_carrier: Carrier = "stream") -> None:
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
            raise ValueError(f"a Channel needs an AF_UNIX SOCK_STREAM socket, not {sock!r}")
        if not 0 <= max_fds <= _SCM_MAX_FD:
            raise ValueError(f"max_fds must be between 0 and {_SCM_MAX_FD}, not {max_fds}")
        if bulk_carrier not in ("stream", "memfd"):
            raise ValueError(f"bulk_carrier must be 'stream' or 'memfd', not {bulk_carrier!r}")
        if min(bulk_threshold, max_message_bytes, max_bulk_bytes) < 0:
            raise ValueError("bulk_threshold, max_message_bytes and max_bulk_bytes cannot be negative")
        sock.setblocking(True)
        self._sock: socket.socket | None = sock
        self.bulk_threshold = bulk_threshold
        self.max_message_bytes = max_message_bytes
        self.max_bulk_bytes = max_bulk_bytes
        self.max_fds = max_fds
        self.bulk_carrier: Carrier = bulk_carrier
        self._broken: str | None = None

    @classmethod
    def pair(cls, **options: Any) -> tuple[Channel, Channel]:
        """Two connected channels (`socket.socketpair`); `options` go to both constructors."""
        left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        return cls(left, **options), cls(right, **options)

    def fileno(self) -> int:
        return self._socket().fileno()

    def detach_socket(self) -> socket.socket:
        """Give up the socket (to hand it to a child process); this channel is closed afterwards."""
        sock = self._socket()
        self._sock = None
        return sock

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ sending

    def send(self, message: Any, timeout: float | None = None) -> None:
        """Send one message. ValueError, before anything is written, if it exceeds this channel's limits;
        ChannelTimeout if the peer did not take it all before `timeout` seconds; ChannelClosed if the
        peer is gone."""
        sock = self._socket()
        deadline = None if timeout is None else time.monotonic() + timeout
        frame = encode_frame(message, self.bulk_threshold, self.max_fds if self.bulk_carrier == "memfd" else 0)
        try:
            if len(frame.skeleton) > self.max_message_bytes:
                raise ValueError(f"the message's skeleton is {len(frame.skeleton)} bytes, over "
                                 f"max_message_bytes={self.max_message_bytes}")
            if frame.bulk_bytes > self.max_bulk_bytes:
                raise ValueError(f"the message carries {frame.bulk_bytes} bytes of tensors, over "
                                 f"max_bulk_bytes={self.max_bulk_bytes}")
            for data in frame.memfd_data:
                frame.fds.append(_write_memfd(data))
            header = _HEADER.pack(MAGIC, len(frame.fds), len(frame.skeleton), sum(len(d) for d in frame.streamed))
            self._send_buffers(sock, [header, frame.skeleton, *frame.streamed], frame.fds, deadline)
        finally:
            for fd in frame.fds:
                os.close(fd)

    def _send_buffers(self, sock: socket.socket, buffers: list[Any], fds: list[int], deadline: float | None) -> None:
        pending = [view for view in (memoryview(b).cast("B") for b in buffers) if len(view)]
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        started = False
        try:
            while pending:
                try:
                    sent = sock.sendmsg(pending[:64], [] if started else ancillary,
                                        socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
                except (BlockingIOError, InterruptedError):
                    if not _wait(sock, select.POLLOUT, deadline):
                        raise ChannelTimeout() from None
                    continue
                except OSError as exc:  # EPIPE, ECONNRESET: the peer is gone
                    raise ChannelClosed(f"sending failed: {exc}") from exc
                started = True
                while sent:
                    step = min(sent, len(pending[0]))
                    pending[0] = pending[0][step:]
                    sent -= step
                    if not pending[0]:
                        pending.pop(0)
                if pending and deadline is not None and time.monotonic() > deadline:
                    raise ChannelTimeout()
        except (ChannelClosed, ChannelTimeout):
            if started:
                self._broken = "a send stopped part way through a message"
            raise

    # ------------------------------------------------------------------ receiving

    def receive(self, timeout: float | None = None) -> Any:
        """The next message. ChannelTimeout if it is not complete within `timeout` seconds (a timeout
        before its first byte leaves the channel usable); ChannelClosed at end of stream; ChannelError
        if the peer sent anything malformed."""
        sock = self._socket()
        deadline = None if timeout is None else time.monotonic() + timeout
        reader = _Reader(sock, deadline, self.max_fds)
        try:
            try:
                return self._receive(reader)
            except (TypeError, ValueError, RuntimeError, OverflowError, MemoryError) as exc:
                # a check above missed some crafted value; the message is malformed all the same
                raise ChannelError(f"{type(exc).__name__}: {exc}") from exc
        except ChannelError as exc:
            self._broken = f"an earlier message was malformed ({exc})"
            raise
        except (ChannelClosed, ChannelTimeout):
            if reader.started:
                self._broken = "a receive stopped part way through a message"
            raise
        finally:
            for fd in reader.fds:
                os.close(fd)

    def _receive(self, reader: _Reader) -> Any:
        magic, nfds, skeleton_length, streamed = _HEADER.unpack(reader.read(_HEADER.size, ancillary=True))
        if magic != MAGIC:
            raise ChannelError(f"bad magic {magic!r}")
        if nfds > self.max_fds:
            raise ChannelError(f"{nfds} descriptors announced, over max_fds={self.max_fds}")
        if not 0 < skeleton_length <= self.max_message_bytes:
            raise ChannelError(f"skeleton of {skeleton_length} bytes (max_message_bytes={self.max_message_bytes})")
        if streamed > self.max_bulk_bytes:
            raise ChannelError(f"{streamed} streamed bytes announced, over max_bulk_bytes={self.max_bulk_bytes}")
        payload = reader.read(skeleton_length, ancillary=True)
        if len(reader.fds) != nfds:
            raise ChannelError(f"{nfds} descriptors announced, {len(reader.fds)} received")
        tree, views, storages = load_skeleton(payload)
        check_storages(storages, nfds, streamed, self.max_bulk_bytes)
        checked_views = [check_view(view, storages) for view in views]
        unused = sorted(set(range(len(storages))) - {index for index, *_ in checked_views})
        if unused:
            raise ChannelError(f"storages {unused[:8]} are never used by a view")
        buffers = [_allocate(nbytes) for _, nbytes in storages]
        for (carrier, _), buffer in zip(storages, buffers, strict=True):
            if carrier == STREAM:
                reader.read_into(buffer.numpy().data)
        memfds = iter(reader.fds)
        for (carrier, nbytes), buffer in zip(storages, buffers, strict=True):
            if carrier == MEMFD:
                _read_memfd(next(memfds), nbytes, buffer.numpy().data)
        if not views:
            return tree
        tensors = [torch.empty(0, dtype=dtype).set_(buffers[index].untyped_storage(), offset, shape, stride)
                   for index, dtype, shape, stride, offset in checked_views]
        substitution = Substitution(tensors)
        result = substitution.rebuild(tree)
        unused = sorted(set(range(len(tensors))) - substitution.used)
        if unused:
            raise ChannelError(f"views {unused[:8]} are never used in the message")
        return result

    def _socket(self) -> socket.socket:
        if self._broken is not None:
            raise ChannelError(self._broken)
        if self._sock is None:
            raise ChannelClosed("this channel is closed")
        return self._sock


def _write_memfd(data: memoryview) -> int:
    """A sealed anonymous memfd holding `data`."""
    fd = os.memfd_create("kernel-grader-channel", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        if len(data):
            os.posix_fallocate(fd, 0, len(data))  # allocating first and then writing measured faster
        written = 0
        while written < len(data):
            written += os.pwrite(fd, data[written:written + _IO_CHUNK], written)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return fd


# ---------------------------------------------------------------------- receiving


def _wait(sock: socket.socket, events: int, deadline: float | None) -> bool:
    """Wait until `sock` is ready for `events` (or hung up); False if the deadline passed first."""
    if deadline is None:
        timeout_ms = None
    else:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        timeout_ms = max(1, math.ceil(left * 1000))
    poller = select.poll()
    poller.register(sock.fileno(), events)
    return bool(poller.poll(timeout_ms))


class _Reader:
    """Reads the bytes of one message from the socket before a deadline, collecting passed descriptors."""

    def __init__(self, sock: socket.socket, deadline: float | None, max_fds: int) -> None:
        self.sock = sock
        self.deadline = deadline
        self.max_fds = max_fds
        self.fds: list[int] = []
        self.started = False
        self._ancillary_size = socket.CMSG_SPACE(max(1, max_fds) * array.array("i").itemsize)

    def read(self, size: int, *, ancillary: bool = False) -> bytearray:
        """`size` bytes; the buffer grows as they arrive, so a header announcing 2 GiB costs nothing until
        the bytes come."""
        buffer = bytearray()
        while len(buffer) < size:
            start = len(buffer)
            buffer += bytes(min(size - start, _GROW_BYTES))
            with memoryview(buffer) as whole, whole[start:] as part:
                self.read_into(part, ancillary=ancillary)
        return buffer

    def read_into(self, view: memoryview, *, ancillary: bool = False) -> None:
        done = 0
        while done < len(view):
            try:
                if ancillary:
                    got, cmsgs, flags, _ = self.sock.recvmsg_into(
                        [view[done:]], self._ancillary_size, socket.MSG_DONTWAIT | socket.MSG_CMSG_CLOEXEC)
                    self._take_descriptors(cmsgs, flags)
                else:  # descriptors sent along the streamed bytes are closed by the kernel
                    got = self.sock.recv_into(view[done:], len(view) - done, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                if not _wait(self.sock, select.POLLIN, self.deadline):
                    raise ChannelTimeout() from None
                continue
            except OSError as exc:
                raise ChannelClosed(f"receiving failed: {exc}") from exc
            if not got:
                raise ChannelClosed("end of stream" + (" in the middle of a message" if self.started else ""))
            self.started = True
            done += got
            if done < len(view) and self.deadline is not None and time.monotonic() > self.deadline:
                raise ChannelTimeout()

    def _take_descriptors(self, cmsgs: list[tuple[int, int, bytes]], flags: int) -> None:
        for level, kind, data in cmsgs:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
                self.fds.extend(fds)
        if flags & socket.MSG_CTRUNC or len(self.fds) > self.max_fds:
            raise ChannelError(f"more than max_fds={self.max_fds} descriptors were sent")


def _allocate(nbytes: int) -> torch.Tensor:
    """A fresh uint8 buffer of `nbytes`; large ones in an anonymous mapping advised to use huge pages
    (a fresh 4 KiB page costs microseconds to fault in on a VM)."""
    if nbytes < _HUGE_BYTES:
        return torch.empty(nbytes, dtype=torch.uint8)
    try:
        area = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except OSError as exc:
        raise ChannelError(f"cannot allocate {nbytes} bytes for a received tensor: {exc}") from exc
    if hasattr(mmap, "MADV_HUGEPAGE"):
        area.madvise(mmap.MADV_HUGEPAGE)
    return torch.frombuffer(area, dtype=torch.uint8)


def _read_memfd(fd: int, nbytes: int, into: memoryview) -> None:
    """Copy a sealed memfd of exactly `nbytes` into `into`; ChannelError for anything else."""
    try:
        info = os.fstat(fd)
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS) if stat.S_ISREG(info.st_mode) else 0
    except OSError as exc:
        raise ChannelError(f"a passed descriptor is not a sealed memfd ({exc})") from exc
    if not stat.S_ISREG(info.st_mode) or seals & _SEALS != _SEALS:
        raise ChannelError("a passed descriptor is not a memfd sealed against shrinking, growing and writing")
    if info.st_size != nbytes:
        raise ChannelError(f"a memfd holds {info.st_size} bytes, its storage entry says {nbytes}")
    if info.st_blocks * 512 < nbytes:
        raise ChannelError(f"a memfd of {nbytes} bytes has only {info.st_blocks * 512} written")
    done = 0
    while done < nbytes:
        try:
            got = os.preadv(fd, [into[done:done + _IO_CHUNK]], done)
        except OSError as exc:
            raise ChannelError(f"reading a memfd failed: {exc}") from exc
        if not got:
            raise ChannelError(f"a memfd of {nbytes} bytes ended after {done}")
        done += got
