"""Benchmark helper: the machine's CPU seconds per command name (ptxas, python3, ...) over an interval, read from
/proc every 0.1 s, so a short-lived compiler's seconds count to it and not to the parent that reaps it.

    python benchmarks/command_cpu.py SECONDS

Each process's own CPU (utime + stime, not its reaped children's) from its first read to its last; what a process
spent before the interval began is not counted, nor what one that lived under 0.1 s spent. Then the same by thread:
the threads alive at the interval's end, by the process's and the thread's name (a Python main thread shows as its
command; torch's OpenMP pool, CUDA's and Triton's helper threads under names of their own or as "python3 / python3
(other thread)"), counted from the interval's start (a thread started since: all of its CPU)."""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from class_phases import process_table  # noqa: E402


def read_all() -> dict[int, tuple[str, float]]:
    """Every live process's command name and own CPU seconds (not its reaped children's)."""
    names: dict[int, str] = {}
    _, cpu = process_table(names, reaped=False)
    return {pid: (names[pid], seconds) for pid, seconds in cpu.items()}


def thread_cpu() -> dict[tuple[int, int], tuple[str, float]]:
    """(pid, tid) -> ("command (main thread)" or "command / thread name", CPU seconds) for every live thread."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[tuple[int, int], tuple[str, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            tids = os.listdir(f"/proc/{entry}/task")
        except OSError:
            continue
        threads: dict[str, tuple[str, float]] = {}
        for tid in tids:
            try:
                with open(f"/proc/{entry}/task/{tid}/stat", encoding="ascii", errors="replace") as stat:
                    head, tail = stat.read().rsplit(")", 1)
                fields = tail.split()
                threads[tid] = (head.split("(", 1)[-1], (int(fields[11]) + int(fields[12])) / tick)
            except (OSError, ValueError, IndexError):
                continue
        command = threads.get(entry, ("?", 0.0))[0]
        for tid, (name, cpu) in threads.items():
            found[int(entry), int(tid)] = (f"{command} (main thread)" if tid == entry else f"{command} / {name}", cpu)
    return found


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    threads_then = thread_cpu()
    start = read_all()
    first = {pid: cpu for pid, (_, cpu) in start.items()}
    last: dict[int, tuple[str, float]] = dict(start)
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        time.sleep(0.1)
        for pid, (name, cpu) in read_all().items():
            if pid not in last or last[pid][0] != name:  # new, or exec'd another program (ptxas after fork)
                first.setdefault(pid, 0.0)
                if pid in last and last[pid][0] != name:
                    first[pid] = 0.0
            last[pid] = (name, cpu)
    by_name: dict[str, float] = defaultdict(float)
    for pid, (name, cpu) in last.items():
        by_name[name] += max(0.0, cpu - first.get(pid, 0.0))
    total = sum(by_name.values())
    print(f"CPU seconds per command over {seconds:g} s ({total:.0f} in all, {total / seconds:.1f} cores busy)")
    for name, cpu in sorted(by_name.items(), key=lambda item: -item[1])[:25]:
        print(f"  {name:24} {cpu:8.1f}  {100 * cpu / max(total, 1e-9):5.1f}%")
    by_thread: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for key, (name, cpu) in thread_cpu().items():
        by_thread[name] += max(0.0, cpu - threads_then.get(key, ("", 0.0))[1])
        count[name] += 1
    alive = sum(by_thread.values())
    print(f"CPU seconds per thread name, threads alive at the end ({alive:.0f} in all)")
    for name, cpu in sorted(by_thread.items(), key=lambda item: -item[1])[:25]:
        print(f"  {name:44} {cpu:8.1f}  {100 * cpu / max(alive, 1e-9):5.1f}%  ({count[name]} threads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
