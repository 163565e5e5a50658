"""Where a class batch's CPU-seconds and GPU-slot seconds go, phase by phase, over every grade of the batch.

Used by benchmarks/class_batch.py --phases. While `grader batch` runs with $GRADER_PHASE_TRACE set (every grade
appends its phases' spans, grader.running.phases), a thread reads /proc every `every_s`: each grade is a process
under the batch (its child, or its child template's: grader.operations.child_template) that traced spans, and its
CPU seconds are its whole process tree's (its sandbox, zygote, workers and the children they reaped). Each interval
between two reads of a grade is laid on the phase open in that grade at its midpoint (the innermost), as
benchmarks/grading_time.py --profile does for one grade. The table sums the grades: grade-seconds of wall time in
the phase, CPU-seconds, CPU-seconds per grade, and the cores the phase kept busy.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Phases that hold the GPU's exclusive slot (grader.running.timing.runner): the timed and profiled replays.
EXCLUSIVE_PHASES = ("timing/bars", "timing/student", "profile/replay")


SANDBOX_OF = "sbx-"  # a sandbox zygote forked from the batch's zygote template names the grade it serves


def process_table(names: dict[int, str] | None = None,
                  reaped: bool = True) -> tuple[dict[int, int], dict[int, float]]:
    """Every live process's parent and CPU seconds (user + system, with the children it has reaped unless `reaped`
    is False); each one's name into `names` where given."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                head, tail = stat.read().rsplit(")", 1)
                fields = tail.split()
        except (OSError, ValueError):
            continue
        pid = int(entry)
        if names is not None:
            names[pid] = head.split("(", 1)[-1]
        parents[pid] = int(fields[1])  # after the name: state, ppid, ..., utime (12th), stime, cutime, cstime
        cpu[pid] = sum(int(f) for f in fields[11:15 if reaped else 13]) / tick
    return parents, cpu


def children_of(parents: Mapping[int, int]) -> dict[int, list[int]]:
    children: dict[int, list[int]] = defaultdict(list)
    for pid, parent in parents.items():
        children[parent].append(pid)
    return children


def tree_cpu(root: int, children: Mapping[int, Sequence[int]], cpu: Mapping[int, float]) -> float:
    """The CPU seconds of `root` and every live descendant."""
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return total


def cpu_by_descendant(root: int, parents: Mapping[int, int], cpu: Mapping[int, float],
                      names: Mapping[int, str] | None = None) -> dict[int, float]:
    """For every process under `root`: the CPU seconds of its whole live tree (a grade is whichever of them traced
    spans: a child of the batch, or of the template the batch forks its children from). A sandbox forked from the
    batch's zygote template is under the template, not its grade: its tree counts to the grade its name gives."""
    children = children_of(parents)
    found, todo = {}, list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        found[pid] = tree_cpu(pid, children, cpu)
        todo.extend(children.get(pid, ()))
    for pid, name in (names or {}).items():
        grade = name[len(SANDBOX_OF):] if name.startswith(SANDBOX_OF) else ""
        if grade.isdigit() and int(grade) in found and parents.get(pid) in found and \
                not (names or {}).get(parents.get(pid, 0), "").startswith(SANDBOX_OF):
            found[int(grade)] += tree_cpu(pid, children, cpu)  # the sandbox's first process: its tree once
    return found


@dataclass
class ClassSampler:
    """Reads /proc every `every_s` until stopped: per process under `root` (a grade, if it traces spans), (time, CPU
    seconds so far)."""

    root: int
    every_s: float = 0.25
    samples: dict[int, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    least_available: tuple[float, int] = (0.0, -1)  # (when, bytes): the machine's least MemAvailable seen

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> ClassSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            names: dict[int, str] = {}
            parents, cpu = process_table(names)
            for child, seconds in cpu_by_descendant(self.root, parents, cpu, names).items():
                self.samples[child].append((now, seconds))
            available = memory_available_bytes()
            if available >= 0 and (self.least_available[1] < 0 or available < self.least_available[1]):
                self.least_available = (now, available)
            self._stop.wait(self.every_s)


def memory_available_bytes() -> int:
    """The machine's MemAvailable (/proc/meminfo), -1 where unreadable: a class whose workers crash together may
    have run the host out of memory (the kernel's OOM killer), not the GPU."""
    try:
        for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return -1


def read_trace(path: Path) -> dict[int, list[dict]]:
    """The trace's spans per process (lines that do not parse, a write cut short, are skipped)."""
    spans: dict[int, list[dict]] = defaultdict(list)
    if not path.is_file():
        return spans
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            span = json.loads(line)
            spans[int(span["pid"])].append(span)
        except (ValueError, KeyError, TypeError):
            continue
    return spans


def phase_at(spans: Sequence[dict], moment: float) -> str:
    """The innermost phase open at `moment` ("(outside phases)" before, between or after them)."""
    open_now = [s for s in spans if s["start"] <= moment < s["end"]]
    return max(open_now, key=lambda s: s["start"])["phase"] if open_now else "(outside phases)"


def class_table(samples: Mapping[int, Sequence[tuple[float, float]]],
                spans: Mapping[int, Sequence[dict]]) -> dict[str, dict[str, float]]:
    """Per phase, summed over the grades that traced spans: wall grade-seconds, CPU seconds and how many grades
    entered it."""
    table: dict[str, dict[str, float]] = defaultdict(lambda: {"wall_s": 0.0, "cpu_s": 0.0, "grades": 0.0})
    for pid, rows in samples.items():
        mine = spans.get(pid)
        if not mine:
            continue  # a child that graded nothing traced (or was not a grade)
        seen = set()
        for (t0, c0), (t1, c1) in zip(rows, rows[1:], strict=False):
            phase = phase_at(mine, (t0 + t1) / 2)
            row = table[phase]
            row["wall_s"] += t1 - t0
            row["cpu_s"] += max(c1 - c0, 0.0)
            if phase not in seen:
                seen.add(phase)
                row["grades"] += 1
    return dict(table)


def _union(intervals: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _overlap_s(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    """Seconds two unions of intervals share."""
    total, j = 0.0, 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            total += max(0.0, min(end, b[k][1]) - max(start, b[k][0]))
            k += 1
    return total


def slot_use(spans: Mapping[int, Sequence[dict]]) -> dict[str, float]:
    """Pure: how the GPU's exclusive slot was used over a batch, from the grades' traced spans
    (grader.running.processes.gpu_slot): `held_s`, the time some grade held it; `wanted_s`, the time some grade held
    or waited for it; `idle_wanted_s`, the time some grade waited and none held it (the shared holders' requests
    draining: no new GPU work starts then); `drain_s`, the grade-seconds spent first in line waiting for that drain;
    `first`/`last`, the batch's first and last traced moments."""
    every = [s for rows in spans.values() for s in rows]
    if not every:
        return {"held_s": 0.0, "wanted_s": 0.0, "idle_wanted_s": 0.0, "drain_s": 0.0, "first": 0.0, "last": 0.0}
    held = _union([(s["start"], s["end"]) for s in every if s["phase"] == "gpu-slot/exclusive"])
    waited = _union([(s["start"], s["end"]) for s in every
                     if s["phase"] in ("timing/wait-for-slot", "gpu-slot/drain")])
    wanted = _union(held + waited)
    held_s = sum(end - start for start, end in held)
    wanted_s = sum(end - start for start, end in wanted)
    return {"held_s": held_s, "wanted_s": wanted_s,
            "idle_wanted_s": sum(end - start for start, end in waited) - _overlap_s(waited, held),
            "drain_s": sum(s["end"] - s["start"] for s in every if s["phase"] == "gpu-slot/drain"),
            "first": min(s["start"] for s in every), "last": max(s["end"] for s in every)}


def slot_line(use: Mapping[str, float]) -> str:
    """The slot's use in one line (`slot_use`)."""
    span = max(use["last"] - use["first"], 1e-9)
    return (f"    the exclusive slot: held {use['held_s']:.1f} s of the batch's {span:.1f} s "
            f"({use['held_s'] / span:.0%}); "
            f"wanted (held or waited for) {use['wanted_s']:.1f} s; waited for while nobody held it "
            f"{use['idle_wanted_s']:.1f} s (shared holders draining: {use['drain_s']:.1f} grade-s first in line)")


def seat_use(spans: Mapping[int, Sequence[dict]]) -> dict[str, float]:
    """Pure: how the timing seats were used (grader.running.processes.gpu_seats, traced `gpu-seat/held` by the runner):
    `held_s`, the grade-seconds seats were held; `any_s`, the time at least one was; `most`, the most held at once
    (the seat count the GPU's memory allowed, where the batch filled them)."""
    held = sorted((s["start"], s["end"]) for rows in spans.values() for s in rows if s["phase"] == "gpu-seat/held")
    moments = sorted([(start, 1) for start, _ in held] + [(end, -1) for _, end in held])
    now = most = 0
    for _, step in moments:
        now += step
        most = max(most, now)
    return {"held_s": sum(end - start for start, end in held),
            "any_s": sum(end - start for start, end in _union(held)), "most": float(most)}


def seat_line(use: Mapping[str, float]) -> str:
    """The seats' use in one line (`seat_use`)."""
    return (f"    the timing seats: held {use['held_s']:.1f} grade-s, at least one held {use['any_s']:.1f} s, "
            f"at most {use['most']:.0f} at once")


def long_spans(spans: Mapping[int, Sequence[dict]], phase: str, at_least_s: float) -> list[str]:
    """Pure: each span of `phase` that lasted `at_least_s` or more, one line: when it started (seconds into the batch),
    how long it lasted, whether some grade held the GPU's exclusive slot during it and for how long, and what the
    other grades were doing at its middle (their innermost phases, counted): what a class run must explain about a
    correct file's request that timed out beside others."""
    every = [s for rows in spans.values() for s in rows]
    if not every:
        return []
    first = min(s["start"] for s in every)
    held = _union([(s["start"], s["end"]) for s in every if s["phase"] == "gpu-slot/exclusive"])
    lines = []
    for pid, rows in sorted(spans.items()):
        for span in rows:
            if span["phase"] != phase or span["end"] - span["start"] < at_least_s:
                continue
            middle = (span["start"] + span["end"]) / 2
            beside: dict[str, int] = defaultdict(int)
            for other, theirs in spans.items():
                if other != pid and any(s["start"] <= middle < s["end"] for s in theirs):
                    beside[phase_at(theirs, middle)] += 1
            exclusive = _overlap_s(held, [(span["start"], span["end"])])
            shown = ", ".join(f"{name} {count}" for name, count in sorted(beside.items(), key=lambda i: -i[1]))
            lines.append(f"    {phase} of grade {pid} at {span['start'] - first:.1f} s for "
                         f"{span['end'] - span['start']:.1f} s; the slot held exclusive {exclusive:.1f} s of it; "
                         f"beside it: {shown or 'nothing'}")
    return lines


def table_lines(table: Mapping[str, Mapping[str, float]], grades: int) -> list[str]:
    """The table, largest CPU first, with the totals and the exclusive slot's share."""
    lines = [f"    {'phase':24} {'grades':>6} {'wall grade-s':>12} {'CPU s':>8} {'CPU s/grade':>11} {'cores':>6}"]
    for phase, row in sorted(table.items(), key=lambda item: -item[1]["cpu_s"]):
        cores = row["cpu_s"] / row["wall_s"] if row["wall_s"] else 0.0
        lines.append(f"    {phase:24} {row['grades']:6.0f} {row['wall_s']:12.1f} {row['cpu_s']:8.1f} "
                     f"{row['cpu_s'] / max(grades, 1):11.2f} {cores:6.2f}")
    cpu = sum(row["cpu_s"] for row in table.values())
    wall = sum(row["wall_s"] for row in table.values())
    slot = sum(row["wall_s"] for phase, row in table.items() if phase in EXCLUSIVE_PHASES)
    waiting = sum(row["wall_s"] for phase, row in table.items() if phase == "timing/wait-for-slot")
    lines.append(f"    all phases: {wall:.1f} grade-s of wall, {cpu:.1f} CPU-s ({cpu / max(grades, 1):.1f} per grade); "
                 f"the GPU's exclusive slot held {slot:.1f} s ({slot / max(grades, 1):.2f} per grade), "
                 f"waited for {waiting:.1f} grade-s")
    return lines
