"""Time sending one float32 tensor between two processes: the old pipe protocol against the socket channel.

    PYTHONPATH=. python benchmarks/channel_throughput.py [--sizes 1 64 256] [--repeats 5]
        [--transports pipe stream memfd]

pipe: the grader's first framing (a length, then a torch.save payload: `pipe_send`/`pipe_receive` below)
over two pipes; stream and memfd:
`worker.channel.Channel` over a socketpair, with its bulk carrier set to that name. The child is a
fresh Python process given its pipe or socket descriptors. For each size it first sends the tensor
once each way, untimed, and checks it arrived equal; then it times `repeats` rounds:

    parent->child  from the parent's send until the child's one-byte-ish acknowledgement arrived
    child->parent  from the parent's request until the tensor the child sent was received

Prints one line per (size, direction, transport) with the median and the range, in seconds.

The child drops each message before it waits for the next. The worker's loop today (`request =
receive(...)`) keeps the previous request alive while it waits: the memory of a 256 MiB tensor is then
still mapped while the next one's fresh huge pages are faulted in, which cost 0.05-0.1 s more per
256 MiB message on the 2-core VM.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import socket
import statistics
import struct
import subprocess
import sys
import time
from typing import Any

import torch

from grader.running.worker.channel import Channel

_LENGTH = struct.Struct("<Q")


def pipe_send(fd: int, message: Any) -> None:
    """The grader's first framing: the payload's length, then `torch.save` of the message."""
    buffer = io.BytesIO()
    torch.save(message, buffer)
    data = memoryview(_LENGTH.pack(len(buffer.getvalue())) + buffer.getvalue())
    while data:
        data = data[os.write(fd, data):]


def pipe_receive(fd: int) -> Any:
    def exactly(size: int) -> bytes:
        chunks = []
        while size:
            chunk = os.read(fd, min(size, 1 << 20))
            if not chunk:
                raise EOFError("the pipe closed")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    (size,) = _LENGTH.unpack(exactly(_LENGTH.size))
    return torch.load(io.BytesIO(exactly(size)), weights_only=True)


def make_tensor(mib: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(mib)
    return torch.randn((mib << 20) // 4, generator=generator)


class PipeEnd:
    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd, self.write_fd = read_fd, write_fd

    def send(self, message: Any) -> None:
        pipe_send(self.write_fd, message)

    def receive(self) -> Any:
        return pipe_receive(self.read_fd)


class ChannelEnd:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    def send(self, message: Any) -> None:
        self.channel.send(message, timeout=120)

    def receive(self) -> Any:
        return self.channel.receive(120)


def child(transport: str, fds: list[int]) -> int:
    end: PipeEnd | ChannelEnd
    if transport == "pipe":
        end = PipeEnd(fds[0], fds[1])
    else:
        end = ChannelEnd(Channel(socket.socket(fileno=fds[0]), bulk_carrier=transport))  # type: ignore[arg-type]
    tensor = torch.empty(0)
    while True:
        request = end.receive()
        op = request["op"]
        if op == "prepare":
            tensor = make_tensor(request["mib"])
            end.send({"ok": True})
        elif op == "check":
            end.send({"equal": torch.equal(request["data"], tensor)})
        elif op == "take":
            end.send({"ok": True})
        elif op == "give":
            end.send({"data": tensor})
        else:
            return 0
        del request  # before waiting for the next one: two 256 MiB requests alive cost the receive time


def start(transport: str) -> tuple[subprocess.Popen[bytes], PipeEnd | ChannelEnd]:
    script = os.path.abspath(__file__)
    if transport == "pipe":
        to_child_r, to_child_w = os.pipe()
        to_parent_r, to_parent_w = os.pipe()
        process = subprocess.Popen([sys.executable, script, "--child", transport, str(to_child_r), str(to_parent_w)],
                                   pass_fds=(to_child_r, to_parent_w))
        os.close(to_child_r)
        os.close(to_parent_w)
        return process, PipeEnd(to_parent_r, to_child_w)
    mine, theirs = Channel.pair(bulk_carrier=transport)  # type: ignore[arg-type]
    sock = theirs.detach_socket()
    process = subprocess.Popen([sys.executable, script, "--child", transport, str(sock.fileno())],
                               pass_fds=(sock.fileno(),))
    sock.close()
    return process, ChannelEnd(mine)


def measure(transport: str, sizes: list[int], repeats: int) -> list[tuple[int, str, list[float]]]:
    process, end = start(transport)
    rows = []
    try:
        for mib in sizes:
            tensor = make_tensor(mib)
            end.send({"op": "prepare", "mib": mib})
            end.receive()
            end.send({"op": "check", "data": tensor})
            if not end.receive()["equal"]:
                raise SystemExit(f"{transport}: a {mib} MiB tensor arrived changed at the child")
            end.send({"op": "give"})
            if not torch.equal(end.receive()["data"], tensor):
                raise SystemExit(f"{transport}: a {mib} MiB tensor arrived changed at the parent")
            to_child, to_parent = [], []
            for _ in range(repeats):
                started = time.perf_counter()
                end.send({"op": "take", "data": tensor})
                end.receive()
                to_child.append(time.perf_counter() - started)
            for _ in range(repeats):
                started = time.perf_counter()
                end.send({"op": "give"})
                received = end.receive()
                to_parent.append(time.perf_counter() - started)
                del received
            rows += [(mib, "parent->child", to_child), (mib, "child->parent", to_parent)]
        end.send({"op": "stop"})
    finally:
        process.wait(timeout=60)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 64, 256], help="tensor sizes in MiB")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--transports", nargs="+", default=["pipe", "stream", "memfd"],
                        choices=["pipe", "stream", "memfd"])
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child[0], [int(fd) for fd in args.child[1:]])
    print(f"# {platform.node()} {platform.release()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"python {platform.python_version()}; median [min, max] of {args.repeats}, seconds")
    for transport in args.transports:
        for mib, direction, times in measure(transport, args.sizes, args.repeats):
            print(f"{mib:>5} MiB  {direction:<14} {transport:<7} {statistics.median(times):8.3f}  "
                  f"[{min(times):.3f}, {max(times):.3f}]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
