"""compute-sanitizer memcheck: find the tool, and turn its reports into findings. Parsing is pure.

`grader grade --sanitize` runs every kernel case once more in a worker started under
`compute-sanitizer --tool memcheck`, with PyTorch's caching allocator off
(`PYTORCH_NO_CUDA_MEMORY_CACHING=1`): otherwise a tensor sits inside a larger cached block and
memcheck cannot see an access past its end (TRITON_FACTS.md). The grader's guard bands already catch
accesses just outside a buffer; memcheck adds the wild ones, beyond the guards, named by buffer.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader import trap_ids
from grader.evidence.observation import Finding
from grader.running.protocol import ALLOCATION_LINE, POINTERS_LINE

SANITIZER_ARGS = ("--tool", "memcheck", "--print-limit", "50", "--show-backtrace", "no")
SANITIZER_ENV = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
OOB_BY_ACCESS = {"read": trap_ids.OOB_READ, "write": trap_ids.OOB_WRITE}  # memcheck's access -> trap
_CANDIDATES = ("/usr/local/cuda/bin/compute-sanitizer", "/opt/cuda/bin/compute-sanitizer")

_HEAD = re.compile(r"Invalid __global__ (read|write) of size ([\d,]+) bytes?")
_KERNEL = re.compile(r"^\s*at (\S+?)(?:\+0x[0-9a-fA-F]+)?(?: in (.+):(\d+))?$")
_THREAD = re.compile(r"by thread \(([\d,]+),([\d,]+),([\d,]+)\) in block \(([\d,]+),([\d,]+),([\d,]+)\)")
# compute-sanitizer 2025 (CUDA 13, H200) says "Access to 0x..."; older releases "Address 0x...".
_ADDRESS = re.compile(r"(?:Address|Access to) (0x[0-9a-fA-F]+) is (out of bounds|misaligned)")
_NEAREST = re.compile(
    r"and is ([\d,]+) bytes? (before|after) the nearest allocation at (0x[0-9a-fA-F]+) "
    r"of size ([\d,]+) bytes?"
)


def sanitizer_command() -> tuple[str, ...] | None:
    """The memcheck command prefix, or None where compute-sanitizer is not installed."""
    found = shutil.which("compute-sanitizer") or next((c for c in _CANDIDATES if Path(c).is_file()), None)
    return (found, *SANITIZER_ARGS) if found else None


@dataclass(frozen=True)
class MemcheckReport:
    access: str  # "read" or "write"
    size: int
    kernel: str
    thread: tuple[int, ...]
    block: tuple[int, ...]
    address: int
    problem: str  # "out of bounds" or "misaligned"
    nearest: int | None = None
    distance: int | None = None
    side: str = ""  # "before" or "after" the nearest allocation
    nearest_size: int | None = None
    source: str = ""  # "file.py:line" of the access, when the kernel has line info (Triton's do)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_memcheck(text: str) -> list[MemcheckReport]:
    """Every `Invalid __global__ read/write` report in memcheck's output."""
    reports: list[MemcheckReport] = []
    lines = [line.lstrip("=").strip() for line in text.splitlines()]
    for index, line in enumerate(lines):
        head = _HEAD.search(line)
        if not head:
            continue
        block = lines[index + 1 : index + 8]
        fields: dict[str, Any] = {}  # parsed from text: types vary by key
        for item in block:
            if _HEAD.search(item):
                break
            if (m := _KERNEL.match(item)) and "kernel" not in fields:
                fields["kernel"] = m.group(1)
                if m.group(2):
                    fields["source"] = f"{Path(m.group(2)).name}, line {m.group(3)}"
            elif m := _THREAD.search(item):
                fields["thread"] = tuple(_int(g) for g in m.groups()[:3])
                fields["block"] = tuple(_int(g) for g in m.groups()[3:])
            elif m := _ADDRESS.search(item):
                fields["address"] = int(m.group(1), 16)
                fields["problem"] = m.group(2)
            elif m := _NEAREST.search(item):
                fields.update(
                    distance=_int(m.group(1)),
                    side=m.group(2),
                    nearest=int(m.group(3), 16),
                    nearest_size=_int(m.group(4)),
                )
        if "address" not in fields:
            continue
        reports.append(
            MemcheckReport(
                access=head.group(1),
                size=_int(head.group(2)),
                kernel=str(fields.get("kernel", "?")),
                thread=fields.get("thread", ()),
                block=fields.get("block", ()),
                address=int(fields["address"]),
                problem=str(fields["problem"]),
                nearest=fields.get("nearest"),
                distance=fields.get("distance"),
                side=str(fields.get("side", "")),
                nearest_size=fields.get("nearest_size"),
                source=str(fields.get("source", "")),
            )
        )
    return reports


def announced_pointers(text: str) -> list[int]:
    """The device addresses of a request's buffers, as the worker printed them before launching."""
    for line in reversed(text.splitlines()):
        if line.startswith(POINTERS_LINE):
            try:
                return [int(p) for p in line[len(POINTERS_LINE):].split()]
            except ValueError:
                return []
    return []


def announced_allocations(text: str, function: str) -> dict[str, tuple[int, int]]:
    """The tensors a wrapper allocated during a call under the tool, as the worker printed them: a name
    (`a buffer softmax allocated (shape [3, 5000])`) -> (device address, bytes). Malformed lines are skipped."""
    found: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        if not line.startswith(ALLOCATION_LINE):
            continue
        fields = line[len(ALLOCATION_LINE):].split()
        try:
            address, size = int(fields[0]), int(fields[1])
            shape = [int(n) for n in fields[2].split(",") if n] if len(fields) > 2 else []
        except (IndexError, ValueError):
            continue
        name = f"a buffer {function} allocated (shape {shape})"
        count = sum(1 for key in found if key == name or key.startswith(name + " #"))
        found[name if count == 0 else f"{name} #{count + 1}"] = (address, size)
    return found


def memcheck_findings(
    reports: list[MemcheckReport], buffers: Mapping[str, tuple[int, int]]
) -> tuple[Finding, ...]:
    """One finding per (access, buffer): `oob-read` / `oob-write`, naming the buffer the access
    missed, by how far, and which program did it. `buffers`: name -> (device address, bytes)."""
    grouped: dict[tuple[str, str], list[MemcheckReport]] = {}
    for report in reports:
        grouped.setdefault((report.access, _buffer_of(report, buffers)), []).append(report)
    findings = []
    for (access, buffer), group in grouped.items():
        first = group[0]
        where = _where(first, buffer, buffers)
        programs = f" by program {list(first.block)} (thread {list(first.thread)})" if first.block else ""
        source = f" ({first.source})" if first.source else ""
        misaligned = " misaligned" if first.problem == "misaligned" else ""
        findings.append(
            Finding(
                OOB_BY_ACCESS[access],
                f"compute-sanitizer memcheck: {len(group)} invalid{misaligned} {access}(s) of {first.size} bytes in "
                f"{first.kernel}{source}; the first{programs} at an address {where}",
            )
        )
    return tuple(findings)


def _buffer_of(report: MemcheckReport, buffers: Mapping[str, tuple[int, int]]) -> str:
    for name, (start, _size) in buffers.items():
        if report.nearest is not None and report.nearest == start:
            return name
    best = ""
    for name in buffers:  # no allocation info: the closest buffer
        if not best or _gap(report.address, *buffers[name]) < _gap(report.address, *buffers[best]):
            best = name
    return best if report.nearest is None else ""


def _gap(address: int, start: int, size: int) -> int:
    return 0 if start <= address < start + size else min(abs(address - start), abs(address - start - size))


def _where(report: MemcheckReport, buffer: str, buffers: Mapping[str, tuple[int, int]]) -> str:
    if buffer and report.distance is not None:
        return (
            f"{report.distance} bytes {report.side} the buffer `{buffer}`, the nearest allocation (guard bands "
            "included; the pointer may have started from another buffer)"
        )
    if buffer:
        start, size = buffers[buffer]
        offset = report.address - start
        side = f"{offset - size} bytes after" if offset >= size else f"{-offset} bytes before"
        return f"{side} the buffer `{buffer}` (its guard bands included)"
    return f"{report.problem} {hex(report.address)}, not near any buffer of the case"
