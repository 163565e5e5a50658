"""Benchmark helper: read py-spy's collapsed stacks (`py-spy record --format raw`, benchmarks/class_profile.sh) and
say where the samples went: per process command line, the frames most samples ended in (self), and the functions
most samples passed through (inclusive), each as a share of all samples.

    python benchmarks/stacks_summary.py class-stacks.txt [--top 25]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

_LINE = re.compile(r"\s*\((?P<file>[^()]*?)(:\d+)?\)\s*$")
# Frames a blocked thread ends in (py-spy cannot tell a sleeping thread in another PID namespace from a running one,
# so a sandbox's waits would read as work): samples ending in them are counted apart and left out of the shares.
WAITING = ("Zygote.serve", "channel.py:_wait", "_await_reply", "_die_with_parent", "select", "sleep", "waitpid",
           "Event.wait", "Condition.wait", "_recv", "recv_into", "accept", "Thread.join", "Popen.wait", "_try_wait")


def frame_name(frame: str) -> str:
    """`function (path/to/file.py:123)` as `file.py:function` (the line number dropped)."""
    match = _LINE.search(frame)
    if match is None:
        return frame.strip()
    function = frame[:match.start()].strip()
    return f"{Path(match.group('file')).name}:{function}"


def summarise(lines: list[str], top: int) -> list[str]:
    processes: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = waiting = 0
    for line in lines:
        stack, _, count_text = line.rstrip().rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        owners = [i for i, f in enumerate(frames) if f.startswith("process ")]  # nested: a child's under its parent
        owner = frames[owners[-1]].partition(":")[2].strip('"')[:100] if owners else "(one process)"
        if owners:
            frames = frames[owners[-1] + 1:]
        frames = [f for f in frames if not f.startswith("thread ")]
        names = [frame_name(f) for f in frames]
        if names and any(w in names[-1] for w in WAITING):
            waiting += count
            continue
        total += count
        processes[owner] += count
        if names:
            leaves[names[-1]] += count
        for name in set(names):
            inclusive[name] += count
    out = [f"{total} samples of work ({waiting} more ended in a wait: {', '.join(WAITING[:4])}, ...)"]
    for title, counter in (("per process", processes), ("self (the frame a sample ended in)", leaves),
                           ("inclusive (a frame on the stack)", inclusive)):
        out.append(f"{title}:")
        out.extend(f"  {100 * n / max(total, 1):5.1f}%  {name}" for name, n in counter.most_common(top))
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("stacks", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    print("\n".join(summarise(args.stacks.read_text(encoding="utf-8", errors="replace").splitlines(), args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
