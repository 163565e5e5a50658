"""Stands in for compute-sanitizer in CPU tests: runs the worker command it is given, relays its
stderr, and after each launch's buffer-address announcement reports one invalid read 64 bytes past
the first buffer, in compute-sanitizer's own format."""

import subprocess
import sys

POINTERS_LINE = b"grader-buffer-addresses:"

command = sys.argv[1:]
fds = tuple(int(a) for a in command[-2:])  # the worker's socket and marks: python -m grader.running.worker BACKEND S M
child = subprocess.Popen(command, stderr=subprocess.PIPE, pass_fds=fds)
assert child.stderr is not None
for line in iter(child.stderr.readline, b""):
    sys.stderr.buffer.write(line)
    if line.startswith(POINTERS_LINE):
        first = int(line[len(POINTERS_LINE) :].split()[0])
        sys.stderr.buffer.write(
            (
                "========= Invalid __global__ read of size 4 bytes\n"
                "=========     at fake_kernel+0x130 in fused_layers.py:148\n"
                "=========     by thread (3,0,0) in block (1,0,0)\n"
                f"=========     Access to {hex(first + 4096)} is out of bounds\n"
                f"=========     and is 64 bytes after the nearest allocation at {hex(first)} of size 4,032 bytes\n"
                "========= \n"
            ).encode()
        )
    sys.stderr.buffer.flush()
sys.exit(child.wait())
