"""Inside a timer: nothing a kernel writes outside the buffers a run rewrites may survive into a timed sample, or
be written during one, unseen.

A kernel can write past the end of its buffers (Triton checks no bounds): into its allocation's slack, a free block
of the caching allocator, another case's buffers. Kept there, an answer computed once could be copied back on every
later run, and the checks after a sample (outputs equal to the checked run's, inputs their bytes) would pass. So
before every sample the timer (`MemoryWatch.before`) lets the allocator give back the segments it does not use
(a write there faults), poisons every free block, the slack behind every allocation and every buffer any kept run
rewrites before its own runs, then fingerprints every byte the allocator holds but this run's rewritten buffers;
after the sample (`after`) it fingerprints them again: a difference refuses the sample, whatever wrote it.

The fingerprint is a keyed sum over (address, byte) pairs, its key drawn afresh for every sample from os.urandom in
this process: a kernel cannot write bytes that keep it. Poison and fingerprint run as the grader's own Triton kernels
over a table of spans (raw addresses), which allocate nothing between the two fingerprints.

Only torch and triton are imported (a timer loads this after it confined imports).
"""

from __future__ import annotations

import hashlib
import os
import sys
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
import triton
import triton.language as tl

TABLE_ENTRIES = 1 << 16  # spans in one fingerprint (each at most a chunk; chunks grow when memory does)
MIN_CHUNK_BYTES = 1 << 20  # a program's share: thousands of programs over gigabytes
BLOCK_BYTES = 4096


def spans_outside(segments: Sequence[tuple[int, int]], rewritten: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Pure: the (start, nbytes) parts of `segments` that no `rewritten` (start, nbytes) range covers, in address
    order; empty ranges dropped."""
    cuts = sorted((start, start + size) for start, size in rewritten if size > 0)
    spans: list[tuple[int, int]] = []
    for seg_start, seg_size in sorted(segments):
        cursor, seg_end = seg_start, seg_start + seg_size
        for cut_start, cut_end in cuts:
            if cut_end <= cursor or cut_start >= seg_end:
                continue
            if cut_start > cursor:
                spans.append((cursor, cut_start - cursor))
            cursor = max(cursor, cut_end)
        if cursor < seg_end:
            spans.append((cursor, seg_end - cursor))
    return spans


def chunk_table(spans: Sequence[tuple[int, int]], base: int, entries: int = TABLE_ENTRIES,
                min_chunk: int = MIN_CHUNK_BYTES) -> list[int]:
    """Pure: the spans cut into at most `entries` chunks of equal bound, flattened as [offset from `base`, nbytes, ...]
    (a chunk is one program of the fingerprint kernel)."""
    total = sum(size for _, size in spans)
    chunk = max(min_chunk, -(-total // max(entries - len(spans), 1)))
    table: list[int] = []
    for start, size in spans:
        for first in range(0, size, chunk):
            table += [start - base + first, min(chunk, size - first)]
    return table


@triton.jit
def _poison_kernel(base_ptr, table_ptr, BLOCK: tl.constexpr):
    """Every byte of this program's chunk set to 0xFF."""
    chunk = tl.program_id(0)
    start = tl.load(table_ptr + 2 * chunk)
    size = tl.load(table_ptr + 2 * chunk + 1)
    lanes = tl.arange(0, BLOCK).to(tl.int64)
    poison = tl.full((BLOCK,), 255, dtype=tl.uint8)
    for first in range(0, size, BLOCK):
        offsets = first + lanes
        tl.store(base_ptr + start + offsets, poison, mask=offsets < size)


@triton.jit
def _fingerprint_kernel(base_ptr, table_ptr, out_ptr, key, BLOCK: tl.constexpr):
    """out += sum over this program's chunk of mix(address, key) * (byte + 1), wrapping mod 2**64."""
    chunk = tl.program_id(0)
    start = tl.load(table_ptr + 2 * chunk)
    size = tl.load(table_ptr + 2 * chunk + 1)
    acc = tl.zeros((BLOCK,), dtype=tl.int64)
    lanes = tl.arange(0, BLOCK).to(tl.int64)
    for first in range(0, size, BLOCK):
        offsets = first + lanes
        mask = offsets < size
        value = tl.load(base_ptr + start + offsets, mask=mask, other=0).to(tl.int64)
        mixed = (start + offsets) * 0x2545F491 + key
        mixed = mixed ^ (mixed >> 29)
        mixed = mixed * 0x5851F42D + (key >> 7)
        mixed = mixed ^ (mixed >> 32)
        acc += tl.where(mask, mixed * (value + 1), 0)
    tl.atomic_add(out_ptr, tl.sum(acc, axis=0))


class _Address:
    """A device address Triton takes as a uint8 pointer (triton.reinterpret wraps anything with data_ptr)."""

    def __init__(self, address: int, device: torch.device) -> None:
        self.address, self.device = address, device
        self.data, self.shape, self.dtype = None, (0,), torch.uint8

    def data_ptr(self) -> int:
        return self.address

    def stride(self, *args: Any) -> tuple[int, ...]:
        return (1,)


# every kept run's buffers rewritten before its runs, by id (a WeakSet would compare tensors with ==)
_REWRITTEN: weakref.WeakValueDictionary[int, torch.Tensor] = weakref.WeakValueDictionary()


def note_rewritten(buffers: Iterable[torch.Tensor]) -> None:
    """Buffers some run poisons or initialises before each of its own runs: poisoned before every sample of any run."""
    for buffer in buffers:
        _REWRITTEN[id(buffer)] = buffer


def allocator_layout(device: torch.device) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The caching allocator's segments on `device` and what in them holds no tensor's bytes (layout_of)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return layout_of(torch.cuda.memory_snapshot(), index)


def layout_of(snapshot: Sequence[Mapping[str, Any]],
              device_index: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Pure: from torch.cuda.memory_snapshot()'s segments, those of `device_index` (address, bytes) and what in them
    holds no tensor's bytes: free blocks and the slack behind each allocation (address, bytes)."""
    segments, unused = [], []
    for segment in snapshot:
        if int(segment.get("device", device_index)) != device_index:
            continue
        segments.append((int(segment["address"]), int(segment["total_size"])))
        for block in segment.get("blocks", []):
            address, size = int(block["address"]), int(block["size"])
            if block.get("state") == "inactive":
                unused.append((address, size))
            else:  # a block whose requested size is not known is all in use: nothing live is ever poisoned
                requested = int(block.get("requested_size", 0) or 0)
                used = requested if 0 < requested <= size else size
                if used < size:
                    unused.append((address + used, size - used))
    return segments, unused


_SELF_TESTS: dict[str, str] = {}  # device -> "" or why the watch stands aside there


def self_test(device: torch.device) -> str:
    """"" when the watch's own kernels poison and fingerprint a raw span on `device` as they must (once per process);
    else why not, also printed to the worker's log. The watch then stands aside: a timing is never lost to a failure
    of the grader's own check, and the log says the samples were not watched."""
    name = str(device)
    if name in _SELF_TESTS:
        return _SELF_TESTS[name]
    try:
        probe = torch.zeros(3 * BLOCK_BYTES, dtype=torch.uint8, device=device)
        table = torch.tensor([BLOCK_BYTES, BLOCK_BYTES], dtype=torch.int64, device=device)  # the middle third
        base = triton.reinterpret(_Address(probe.data_ptr(), device), tl.uint8)
        sums = torch.zeros(3, dtype=torch.int64, device=device)
        _poison_kernel[(1,)](base, table, BLOCK=BLOCK_BYTES)
        for slot in range(3):
            if slot == 2:
                probe[BLOCK_BYTES + 7] = 3
            _fingerprint_kernel[(1,)](base, table, sums[slot:], 12345, BLOCK=BLOCK_BYTES)
        middle = probe[BLOCK_BYTES:2 * BLOCK_BYTES]
        poisoned = int((middle == 255).sum()) == BLOCK_BYTES - 1 and not bool(probe[:BLOCK_BYTES].any()) \
            and not bool(probe[2 * BLOCK_BYTES:].any())
        first, again, changed = sums.tolist()
        problem = "" if poisoned and first == again != changed else \
            f"its kernels misbehaved (poisoned only the span: {poisoned}; fingerprints {first}, {again}, {changed})"
    except Exception as exc:  # the grader's own kernels failed to compile or launch here
        problem = f"its kernels could not run: {type(exc).__name__}: {exc}"
    _SELF_TESTS[name] = problem
    if problem:
        print(f"grader: the memory watch stands aside on {name}: {problem}", file=sys.stderr, flush=True)
    return problem


_DIGEST_KEY = int.from_bytes(os.urandom(6), "little")  # this process's own, never sent anywhere


def digest(tensor: torch.Tensor) -> int:
    """A keyed fingerprint of a contiguous tensor's bytes, its key this process's secret: the watch's kernel on CUDA
    (0 where its self-test failed: no check), SHA-256 elsewhere. Data the timer keeps (a sealed output) is digested
    when made and again after every sample: a kernel that wrote there in between cannot write bytes that keep it."""
    nbytes = tensor.numel() * tensor.element_size()
    if tensor.device.type != "cuda":
        data = tensor.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()
        return int.from_bytes(hashlib.sha256(_DIGEST_KEY.to_bytes(8, "little") + data).digest()[:8], "little")
    if not nbytes or self_test(tensor.device):
        return 0
    start = tensor.data_ptr()
    table = chunk_table([(start, nbytes)], start)
    table_tensor = torch.tensor(table, dtype=torch.int64, device=tensor.device)
    sums = torch.zeros(1, dtype=torch.int64, device=tensor.device)
    _fingerprint_kernel[(len(table) // 2,)](triton.reinterpret(_Address(start, tensor.device), tl.uint8),
                                            table_tensor, sums, _DIGEST_KEY, BLOCK=BLOCK_BYTES)
    return int(sums.item())


class MemoryWatch:
    """`before()` then `after()` around a timed sample: "" when every watched byte holds what it held, else what
    changed. `rewritten` are the buffers this run itself rewrites before every run (never watched). Where its own
    kernels fail their self-test, it watches nothing (self_test)."""

    def __init__(self, rewritten: Sequence[torch.Tensor], device: torch.device) -> None:
        self.device = device
        self.off = self_test(device)
        self.sums = torch.zeros(2, dtype=torch.int64, device=device)
        self.table = torch.zeros(2 * TABLE_ENTRIES, dtype=torch.int64, device=device)
        self.rewritten = [(t.data_ptr(), t.numel() * t.element_size()) for t in rewritten]
        self.rewritten.append((self.sums.data_ptr(), self.sums.numel() * 8))
        note_rewritten(rewritten)
        self.chunks = 0
        self.watched = 0
        self.key = 0
        self.base = 0
        self._base_pointer: Any = None

    def _load(self, spans: Sequence[tuple[int, int]]) -> Any:
        """The spans as the kernels' table; their base address as a pointer Triton takes."""
        self.base = min((start for start, _ in spans), default=0)
        table = chunk_table(spans, self.base)
        self.chunks = len(table) // 2
        if self.chunks:
            self.table[:len(table)].copy_(torch.tensor(table, dtype=torch.int64))
        return triton.reinterpret(_Address(self.base, self.device), tl.uint8)

    def _fingerprint(self, slot: int, base: Any) -> None:
        self.sums[slot].zero_()
        _fingerprint_kernel[(self.chunks,)](base, self.table, self.sums[slot:], self.key, BLOCK=BLOCK_BYTES)

    def before(self) -> None:
        """Give back unused segments, poison what no tensor holds and every kept run's rewritten buffers, list the
        watched spans anew (the allocator may have grown since) and take the first fingerprint."""
        if self.off:
            return
        torch.cuda.empty_cache()
        for buffer in list(_REWRITTEN.values()):
            buffer.view(torch.uint8).fill_(0xFF)
        segments, unused = allocator_layout(self.device)
        base = self._load(unused)
        if self.chunks:
            _poison_kernel[(self.chunks,)](base, self.table, BLOCK=BLOCK_BYTES)
        spans = spans_outside(segments, self.rewritten)
        self.watched = sum(size for _, size in spans)
        base = self._load(spans)
        if self.chunks:
            self.key = int.from_bytes(os.urandom(6), "little")
            self._fingerprint(0, base)
        self._base_pointer = base

    def after(self) -> str:
        if self.off or not self.chunks:
            return ""
        self._fingerprint(1, self._base_pointer)
        first, second = self.sums.tolist()
        if first == second:
            return ""
        return (f"device memory outside the case's buffers changed during a timed sample (of {self.watched} bytes "
                f"watched): a kernel wrote past its buffers, where an answer could be kept from one run to the next")
