"""Inside an interpreter worker: count what each launch's loads and stores would ask of GPU memory.

The performance traps (grader/judging/performance_traps.py) are judged on the CPU from these counts, a
prediction of what the kernel would do on a GPU. The fence (grader/running/worker/fence.py) sees every
tl.load / tl.store of a launch with its `ptrs` and `mask` arrays; while a request asked for counting
(`counting()`), it hands each one to the launch's `LaunchTraffic`, which keeps, per launch:

- bytes loaded and stored by active lanes;
- per storage (named by the kernel parameter it came in), the bytes loaded and the bytes each program
  loaded at least once, summed over programs: their ratio is how often a program reads the same bytes
  (the interpreter runs programs one after the other, so a program is a run of calls with one grid index);
- requests and 32-byte sectors: a request is what one warp asks, 32 consecutive lanes of the block (one
  element each) taken in the order Triton's coalescing pass would give them (the block's most contiguous
  axis fastest), of which the active ones count; its sectors are the distinct 32-byte segments their
  addresses fall in, against the fewest their distinct bytes could fill;
- how many tl.dot a launch ran (InterpreterBuilder.create_dot);
- for the launch-bound trap: the tl.load / tl.store calls with an active lane and the block elements
  they covered (masked lanes included: the block's size, what the kernel chose), and the runs of the
  kernel (an autotuned launch runs once per config), so programs per run is the grid.

Everything is numpy on arrays the interpreter already has; nothing is counted unless asked, and the
fence's fast path is untouched then.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

SECTOR_BYTES = 32  # the unit a GPU's L2 and DRAM move
WARP_LANES = 32  # lanes of one request


class _Side:
    """Loads or stores of one launch: bytes, requests, sectors and the fewest sectors they could take."""

    def __init__(self) -> None:
        self.bytes = 0
        self.requests = 0
        self.sectors = 0
        self.min_sectors = 0
        self.calls = 0  # tl.load / tl.store calls with an active lane
        self.block_lanes = 0  # the block elements of those calls, masked ones included

    def add(self, addresses: np.ndarray, lanes: np.ndarray, itemsize: int, block: int) -> None:
        """`addresses` of the active lanes, `lanes` their positions in the (coalescing-ordered) block of
        `block` elements."""
        n = int(addresses.size)
        self.bytes += n * itemsize
        self.calls += 1
        self.block_lanes += block
        warp = (lanes // WARP_LANES).astype(np.uint64)
        low = addresses.min()
        if int(addresses.max() - low) >= 1 << 40 or int(warp.max()) >= 1 << 23:  # too spread to key
            self.requests += int(np.unique(warp).size)
            self.sectors += n
            self.min_sectors += n
            return
        group = warp << np.uint64(40)
        sector = (addresses - (low - low % np.uint64(SECTOR_BYTES))) // np.uint64(SECTOR_BYTES)
        self.sectors += int(np.unique(group | sector).size)
        distinct = np.unique(group | (addresses - low)) >> np.uint64(40)
        warps, per_warp = np.unique(distinct, return_counts=True)
        self.requests += int(warps.size)
        self.min_sectors += int(((per_warp * itemsize + SECTOR_BYTES - 1) // SECTOR_BYTES).sum())

    def to_dict(self) -> dict[str, int]:
        return {"bytes": self.bytes, "requests": self.requests, "sectors": self.sectors,
                "min_sectors": self.min_sectors, "calls": self.calls, "block_lanes": self.block_lanes}


class LaunchTraffic:
    """The counts of one top-level launch (its autotune and heuristics levels included)."""

    def __init__(self, kernel: str, names: list[str], starts: np.ndarray) -> None:
        self.kernel = kernel
        self.names = names  # the storages' parameter names, in the order of `starts`
        self.starts = starts
        self.programs = 0
        self.runs = 0  # runs of the kernel that ran a program (one per autotune config)
        self.dots = 0
        self.load = _Side()
        self.store = _Side()
        self.loaded = [0] * len(names)  # bytes loaded, per storage
        self.program_distinct = [0] * len(names)  # bytes each program loaded at least once, summed
        self._program: Any = None
        self._pending: list[list[np.ndarray]] = [[] for _ in names]
        self._itemsize = [1] * len(names)

    def note(self, ptrs: Any, mask: Any, itemsize: int, is_load: bool) -> None:
        addresses, lanes = active_lanes(ptrs, mask, itemsize)
        self._enter(_program_index())
        if addresses.size == 0:
            return
        (self.load if is_load else self.store).add(addresses, lanes, itemsize, int(np.size(ptrs)))
        if is_load and self.names:
            slot = max(int(np.searchsorted(self.starts, addresses.min(), side="right")) - 1, 0)
            self.loaded[slot] += int(addresses.size) * itemsize
            self._pending[slot].append(addresses)
            self._itemsize[slot] = itemsize

    def _enter(self, program: Any) -> None:
        if program != self._program:
            self.flush()
            self.runs += self._program is None
            self._program = program
            self.programs += 1

    def next_run(self) -> None:
        """An inner level starts a run of the kernel (each autotune config runs once in the interpreter):
        its first program is a new one even where its grid index equals the last one's."""
        self.flush()
        self._program = None

    def flush(self) -> None:
        """Close the current program: count the distinct bytes it loaded of each storage."""
        for slot, pending in enumerate(self._pending):
            if pending:
                self.program_distinct[slot] += int(np.unique(np.concatenate(pending)).size) * self._itemsize[slot]
                pending.clear()

    def summary(self) -> dict[str, Any]:
        self.flush()
        storages = [{"name": name, "loaded": loaded, "program_distinct": distinct}
                    for name, loaded, distinct in zip(self.names, self.loaded, self.program_distinct, strict=True)
                    if loaded]
        return {"kernel": self.kernel, "programs": self.programs, "runs": self.runs, "dots": self.dots,
                "load": self.load.to_dict(), "store": self.store.to_dict(), "storages": storages}


def active_lanes(ptrs: Any, mask: Any, itemsize: int) -> tuple[np.ndarray, np.ndarray]:
    """The active lanes' addresses and their positions in the block, flattened with the block's most
    contiguous axis fastest (the order Triton's coalescing pass gives a warp's lanes)."""
    addresses = np.asarray(ptrs, dtype=np.uint64)
    active = None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), addresses.shape)
    if addresses.ndim > 1:
        axis = contiguous_axis(addresses, itemsize)
        addresses = np.moveaxis(addresses, axis, -1)
        active = None if active is None else np.moveaxis(active, axis, -1)
    flat = addresses.reshape(-1)
    if active is None:
        return flat, np.arange(flat.size, dtype=np.int64)
    lanes = np.flatnonzero(active.reshape(-1))
    return flat[lanes], lanes


def contiguous_axis(addresses: np.ndarray, itemsize: int) -> int:
    """The axis along which neighbouring lanes are closest in memory (one element apart at best); the
    last axis where none is."""
    best, best_step = addresses.ndim - 1, None
    for axis in range(addresses.ndim):
        if addresses.shape[axis] < 2:
            continue
        first = np.moveaxis(np.take(addresses, [0, 1], axis=axis), axis, 0).reshape(2, -1)[:, 0].astype(np.int64)
        step = abs(int(first[1] - first[0]))
        if step and (best_step is None or step < best_step or (step == best_step and axis == addresses.ndim - 1)):
            best, best_step = axis, step
    return best


def _program_index() -> Any:
    from triton.runtime import interpreter

    return getattr(interpreter.interpreter_builder, "grid_idx", None)


class _Counting:
    """The launches counted while one request runs."""

    def __init__(self) -> None:
        self.launches: list[LaunchTraffic] = []
        self.current: LaunchTraffic | None = None


_ACTIVE: list[_Counting] = []
_DOTS_PATCHED: list[bool] = []


@contextlib.contextmanager
def counting() -> Iterator[list[LaunchTraffic]]:
    """Count every launch run inside; yields the list the launches are appended to."""
    _patch_dot()
    session = _Counting()
    _ACTIVE.append(session)
    try:
        yield session.launches
    finally:
        _ACTIVE.remove(session)


def begin(kernel: str, names: list[str], starts: np.ndarray) -> LaunchTraffic | None:
    """A top-level launch starts (the fence calls this): its counter, or None when nothing counts."""
    if not _ACTIVE:
        return None
    traffic = LaunchTraffic(kernel, names, starts)
    _ACTIVE[-1].launches.append(traffic)
    _ACTIVE[-1].current = traffic
    return traffic


def end(traffic: LaunchTraffic | None) -> None:
    if traffic is not None:
        traffic.flush()
        if _ACTIVE and _ACTIVE[-1].current is traffic:
            _ACTIVE[-1].current = None


def summaries(launches: list[LaunchTraffic]) -> list[dict[str, Any]]:
    """What the reply carries: one plain dict per launch that ran a program."""
    return [launch.summary() for launch in launches if launch.programs]


def _patch_dot() -> None:
    """Count tl.dot calls of the counted launch (once per process; a pass-through otherwise)."""
    if _DOTS_PATCHED:
        return
    try:
        from triton.runtime.interpreter import InterpreterBuilder
    except ImportError:  # pragma: no cover - every supported triton has it
        return
    original = InterpreterBuilder.create_dot

    def create_dot(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _ACTIVE and _ACTIVE[-1].current is not None:
            _ACTIVE[-1].current.dots += 1
        return original(self, *args, **kwargs)

    InterpreterBuilder.create_dot = create_dot  # type: ignore[method-assign]
    _DOTS_PATCHED.append(True)
