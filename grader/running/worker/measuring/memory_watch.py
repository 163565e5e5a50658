"""Inside a timer: nothing a kernel writes outside the buffers a run rewrites may survive into a timed sample, or
be written during one, unseen.

A kernel can write past the end of its buffers (Triton checks no bounds): into its allocation's slack, a free block
of the caching allocator, another case's buffers. Kept there, an answer computed once could be copied back on every
later run, and the checks after a sample (outputs equal to the checked run's, inputs their bytes) would pass. So
before every sample the timer (`MemoryWatch.before`) lets the allocator give back the segments it does not use
(a write there faults), poisons every free block, the slack behind every allocation and every buffer any kept run
rewrites before its own runs, then fingerprints every byte the allocator holds but this run's rewritten buffers;
after the sample (`after`) it fingerprints them again: a difference refuses the sample, whatever wrote it.

The fingerprint is a keyed sum over (address, 8-byte word) pairs, its key drawn afresh for every sample from
os.urandom in this process: a kernel cannot write bytes that keep it. It reads whole words (a byte at a time cost
8.5 ms per GiB held on an H100, 36 ms a sample at 4 GiB): a watched span is cut to the words inside it, so up to 7
bytes at its ends go unwatched, which hold no answer (they are the slack behind a rewritten buffer, poisoned before
every sample; a buffer's own bytes are digested whole, `digest`). Poison and fingerprint run as the grader's own
Triton kernels over a table of spans (raw addresses), which allocate nothing between the two fingerprints.

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
WORD = 8  # the fingerprint reads int64 words
BLOCK_WORDS = 1024


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


def words_inside(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Pure: each (start, nbytes) span cut to the whole 8-byte words inside it, as (start, nbytes); spans holding no
    whole word dropped."""
    words = []
    for start, size in spans:
        first, end = -(-start // WORD) * WORD, (start + size) // WORD * WORD
        if end > first:
            words.append((first, end - first))
    return words


def chunk_table(spans: Sequence[tuple[int, int]], base: int, entries: int = TABLE_ENTRIES,
                min_chunk: int = MIN_CHUNK_BYTES, unit: int = 1) -> list[int]:
    """Pure: the spans cut into at most `entries` chunks of equal bound, flattened as [offset from `base`, size, ...]
    in `unit`s of bytes (a chunk is one program of the poison or fingerprint kernel; with `unit` 8, every span and
    `base` are whole words: words_inside)."""
    total = sum(size for _, size in spans)
    chunk = max(min_chunk, -(-total // max(entries - len(spans), 1)))
    chunk = -(-chunk // unit) * unit
    table: list[int] = []
    for start, size in spans:
        for first in range(0, size, chunk):
            table += [(start - base + first) // unit, min(chunk, size - first) // unit]
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
    """out += sum over this program's chunk of int64 words of mix(word offset, key) * (word + key), wrapping mod 2**64;
    the mix is odd, so any one word changed changes the sum (and poisoned words, -1, still count)."""
    chunk = tl.program_id(0)
    start = tl.load(table_ptr + 2 * chunk)
    size = tl.load(table_ptr + 2 * chunk + 1)
    acc = tl.zeros((BLOCK,), dtype=tl.int64)
    lanes = tl.arange(0, BLOCK).to(tl.int64)
    for first in range(0, size, BLOCK):
        offsets = first + lanes
        mask = offsets < size
        value = tl.load(base_ptr + start + offsets, mask=mask, other=0)
        mixed = (start + offsets) * 0x2545F491 + key
        mixed = mixed ^ (mixed >> 29)
        mixed = mixed * 0x5851F42D + (key >> 7)
        mixed = (mixed ^ (mixed >> 32)) | 1
        acc += tl.where(mask, mixed * (value + key), 0)
    tl.atomic_add(out_ptr, tl.sum(acc, axis=0))


class _Address:
    """A device address Triton takes as a pointer (triton.reinterpret wraps anything with data_ptr)."""

    def __init__(self, address: int, device: torch.device) -> None:
        self.address, self.device = address, device
        self.data, self.shape, self.dtype = None, (0,), torch.uint8

    def data_ptr(self) -> int:
        return self.address

    def stride(self, *args: Any) -> tuple[int, ...]:
        return (1,)


def _pointer(address: int, device: torch.device, words: bool) -> Any:
    """`address` as Triton's uint8 pointer, or its int64 pointer (`words`: an 8-byte aligned address)."""
    return triton.reinterpret(_Address(address, device), tl.int64 if words else tl.uint8)


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
        middle = [(probe.data_ptr() + BLOCK_BYTES, BLOCK_BYTES)]  # the middle third
        _poison(middle, device)
        fingerprint = _Fingerprint(middle, device)
        sums = [_fingerprint_sum(fingerprint, 12345, device) for _ in range(2)]
        probe[BLOCK_BYTES + 7] = 3
        sums.append(_fingerprint_sum(fingerprint, 12345, device))
        inside = probe[BLOCK_BYTES:2 * BLOCK_BYTES]
        poisoned = int((inside == 255).sum()) == BLOCK_BYTES - 1 and not bool(probe[:BLOCK_BYTES].any()) \
            and not bool(probe[2 * BLOCK_BYTES:].any())
        first, again, changed = sums
        problem = "" if poisoned and first == again != changed else \
            f"its kernels misbehaved (poisoned only the span: {poisoned}; fingerprints {first}, {again}, {changed})"
    except Exception as exc:  # the grader's own kernels failed to compile or launch here
        problem = f"its kernels could not run: {type(exc).__name__}: {exc}"
    _SELF_TESTS[name] = problem
    if problem:
        print(f"grader: the memory watch stands aside on {name}: {problem}", file=sys.stderr, flush=True)
    return problem


def _poison(spans: Sequence[tuple[int, int]], device: torch.device, into: torch.Tensor | None = None) -> None:
    """Every byte of `spans` set to 0xFF (`into`: where the chunks' table goes, else a tensor of its own)."""
    base = min((start for start, _ in spans), default=0)
    table, chunks = _table(chunk_table(spans, base), device, into)
    if chunks:
        _poison_kernel[(chunks,)](_pointer(base, device, words=False), table, BLOCK=BLOCK_BYTES)


def _table(table: list[int], device: torch.device, into: torch.Tensor | None) -> tuple[torch.Tensor, int]:
    """`table` on the device, in `into` where given (nothing allocated), and its number of chunks."""
    if into is None:
        return torch.tensor(table or [0, 0], dtype=torch.int64, device=device), len(table) // 2
    if table:
        into[:len(table)].copy_(torch.tensor(table, dtype=torch.int64))
    return into, len(table) // 2


class _Fingerprint:
    """The fingerprint kernel's launch over the whole words inside some spans, ready to run again (`launch`)."""

    def __init__(self, spans: Sequence[tuple[int, int]], device: torch.device,
                 into: torch.Tensor | None = None) -> None:
        self.words = words_inside(spans)
        self.base = min((start for start, _ in self.words), default=0)
        self.table, self.chunks = _table(chunk_table(self.words, self.base, unit=WORD), device, into)
        self.pointer = _pointer(self.base, device, words=True)

    def launch(self, out: torch.Tensor, key: int) -> None:
        """out[0] = the spans' fingerprint under `key`."""
        out[:1].zero_()
        if self.chunks:
            _fingerprint_kernel[(self.chunks,)](self.pointer, self.table, out, key, BLOCK=BLOCK_WORDS)


def _fingerprint_sum(fingerprint: _Fingerprint, key: int, device: torch.device) -> int:
    sums = torch.zeros(1, dtype=torch.int64, device=device)
    fingerprint.launch(sums, key)
    return int(sums.item())


_DIGEST_KEY = int.from_bytes(os.urandom(6), "little")  # this process's own, never sent anywhere


def _keyed_sha(data: bytes) -> int:
    return int.from_bytes(hashlib.sha256(_DIGEST_KEY.to_bytes(8, "little") + data).digest()[:8], "little")


def digest(tensor: torch.Tensor) -> int:
    """A keyed fingerprint of a contiguous tensor's bytes, its key this process's secret: the watch's kernel on CUDA
    over its whole words, its few bytes outside them hashed on the host (0 where the self-test failed: no check),
    SHA-256 elsewhere. Data the timer keeps (a sealed output) is digested when made and again after every sample: a
    kernel that wrote there in between cannot write bytes that keep it."""
    nbytes = tensor.numel() * tensor.element_size()
    flat = tensor.detach().reshape(-1).view(torch.uint8)
    if tensor.device.type != "cuda":
        return _keyed_sha(flat.contiguous().numpy().tobytes())
    if not nbytes or self_test(tensor.device):
        return 0
    start = flat.data_ptr()
    fingerprint = _Fingerprint([(start, nbytes)], tensor.device)
    head, body = (fingerprint.words[0][0] - start, fingerprint.words[0][1]) if fingerprint.words else (nbytes, 0)
    edges = torch.cat([flat[:head], flat[head + body:]]).cpu().numpy().tobytes() if head or head + body < nbytes \
        else b""
    total = _fingerprint_sum(fingerprint, _DIGEST_KEY, tensor.device) if body else 0
    return (total + (_keyed_sha(edges) if edges else 0)) & ((1 << 64) - 1)


def too_many_spans(unused: int, watched: int, entries: int = TABLE_ENTRIES) -> str:
    """Pure: "" when the watch's table holds both lists of spans, else why the sample is refused (the timer's memory
    cut into more pieces than one table holds: a run of that many buffers is not watched, so it is not timed)."""
    if max(unused, watched) < entries:
        return ""
    return (f"the timed case's buffers cut the timer's memory into {max(unused, watched)} pieces, more than the memory "
            f"watch holds ({entries - 1}): it cannot be timed unwatched")


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
        self.watched = 0
        self.key = 0
        self.fingerprint: _Fingerprint | None = None
        self.unwatchable = ""

    def before(self) -> None:
        """Give back unused segments, poison what no tensor holds and every kept run's rewritten buffers, list the
        watched spans anew (the allocator may have grown since) and take the first fingerprint."""
        if self.off:
            return
        torch.cuda.empty_cache()
        for buffer in list(_REWRITTEN.values()):
            buffer.view(torch.uint8).fill_(0xFF)
        segments, unused = allocator_layout(self.device)
        spans = spans_outside(segments, self.rewritten)
        self.unwatchable = too_many_spans(len(unused), len(spans))
        if self.unwatchable:
            self.fingerprint = None
            return
        _poison(unused, self.device, self.table)
        self.fingerprint = _Fingerprint(spans, self.device, self.table)
        self.watched = sum(size for _, size in self.fingerprint.words)
        self.key = int.from_bytes(os.urandom(6), "little")
        self.fingerprint.launch(self.sums[0:], self.key)

    def after(self) -> str:
        if self.unwatchable:
            return self.unwatchable
        if self.off or self.fingerprint is None or not self.fingerprint.chunks:
            return ""
        self.fingerprint.launch(self.sums[1:], self.key)
        first, second = self.sums.tolist()
        if first == second:
            return ""
        return (f"device memory outside the case's buffers changed during a timed sample (of {self.watched} bytes "
                f"watched): a kernel wrote past its buffers, where an answer could be kept from one run to the next")
