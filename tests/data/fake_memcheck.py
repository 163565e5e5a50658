"""Stands in for compute-sanitizer in CPU tests: runs the worker command it is given, relays its
stderr, and reports one invalid access in compute-sanitizer's own format.

    fake_memcheck.py [--write] [--at-allocation] python -m grader.running.worker BACKEND FD...

By default, after each request's buffer-address announcement, a read 64 bytes past the first buffer.
`--write`: a write instead. `--at-allocation`: 64 bytes past the first tensor the wrapper allocates
(its announcement line), instead of past the first buffer. The report goes out before the worker's
reply, as memcheck's does, or as the worker exits, whichever comes first."""

import subprocess
import sys

POINTERS_LINE = b"grader-buffer-addresses:"
ALLOCATION_LINE = b"grader-allocation:"

args = sys.argv[1:]
access = "read"
marker = POINTERS_LINE
while args and args[0].startswith("--"):
    flag = args.pop(0)
    if flag == "--write":
        access = "write"
    elif flag == "--at-allocation":
        marker = ALLOCATION_LINE
command = args
backend_at = command.index("grader.running.worker") + 1
fds = tuple(int(a) for a in command[backend_at + 1 :])  # the worker's socket and progress pipe
child = subprocess.Popen(command, stderr=subprocess.PIPE, pass_fds=fds)
assert child.stderr is not None
for line in iter(child.stderr.readline, b""):
    sys.stderr.buffer.write(line)
    if line.startswith(marker):
        first = int(line[len(marker) :].split()[0])
        sys.stderr.buffer.write(
            (
                f"========= Invalid __global__ {access} of size 4 bytes\n"
                "=========     at fake_kernel+0x130 in fused_layers.py:148\n"
                "=========     by thread (3,0,0) in block (1,0,0)\n"
                f"=========     Access to {hex(first + 4096)} is out of bounds\n"
                f"=========     and is 64 bytes after the nearest allocation at {hex(first)} of size 4,032 bytes\n"
                "========= \n"
            ).encode()
        )
    sys.stderr.buffer.flush()
code = child.wait()
sys.stderr.buffer.write(b"========= ERROR SUMMARY: 1 error\n")
sys.exit(code)
