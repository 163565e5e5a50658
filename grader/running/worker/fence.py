"""Inside an interpreter worker: no kernel access outside the storages its launch was given.

Under TRITON_INTERPRET a pointer is a plain address and `tl.load` / `tl.store` read and write it with
no bounds check (Triton's C++ `interpreter.load/store`). The grader's guard bands catch the stray
accesses a launch's own numbers can form (grader/running/guards.py), but a band has a width: an
address past it lands in the worker's heap, where a write corrupts Python's allocator and a later,
innocent case fails with `unknown opcode` or `realloc(): invalid pointer`, differently on every run.

The fence wraps those four memory functions (load, store, atomic_cas, atomic_rmw): while a launch
runs, every active lane's address must lie inside the whole storage (guard bands included) of one
of the tensors passed to that launch. A lane outside stops the kernel with `StrayWrite` or
`StrayRead` before any byte moves; the grader names these `oob-write` / `oob-read`
(grader.running.observation.classify_error). Correct code never notices: it touches only its tensors.

Nothing here runs on a GPU, where the hardware faults on unmapped addresses instead.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from grader.running.worker import traffic


class StrayAccess(Exception):
    """A kernel addressed memory outside every storage its launch was given."""


class StrayRead(StrayAccess):
    pass


class StrayWrite(StrayAccess):
    pass


class _Launch:
    """The storages one launch may touch: sorted [start, end) byte ranges, each with a parameter name."""

    def __init__(self, ranges: list[tuple[int, int, str]]) -> None:
        ranges.sort()
        self.starts = np.array([r[0] for r in ranges], dtype=np.uint64)
        self.ends = np.array([r[1] for r in ranges], dtype=np.uint64)
        self.names = [r[2] for r in ranges]
        self.traffic: traffic.LaunchTraffic | None = None  # counted while a request asks (worker/traffic.py)

    def check(self, ptrs: Any, mask: Any, itemsize: int, stray: type[StrayAccess]) -> None:
        addresses = np.asarray(ptrs, dtype=np.uint64).reshape(-1)
        if mask is not None:
            addresses = addresses[np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(ptrs)).reshape(-1)]
        if addresses.size == 0:
            return
        size = np.uint64(itemsize)
        low, high = addresses.min(), addresses.max()
        for start, end in zip(self.starts, self.ends, strict=True):  # fast path: all in one storage
            if start <= low and high <= end - size:
                return
        slot = np.maximum(np.searchsorted(self.starts, addresses, side="right").astype(np.int64) - 1, 0)
        inside = (self.starts[slot] <= addresses) & (addresses <= self.ends[slot] - size)
        outside = addresses[~inside]
        if outside.size:
            raise stray(self._describe(int(outside[0]), int(outside.size), itemsize, stray is StrayWrite))

    def _describe(self, first: int, count: int, itemsize: int, write: bool) -> str:
        where = "the launch was given no tensor"
        distances = []
        for index, (start, end) in enumerate(zip(self.starts.tolist(), self.ends.tolist(), strict=True)):
            if first >= start:
                distances.append(((first + itemsize - end + itemsize - 1) // itemsize, "past the end", index))
            else:
                distances.append(((start - first + itemsize - 1) // itemsize, "before the start", index))
        if distances:
            elements, side, nearest = min(distances)
            where = (f"the first lies {elements} element(s) {side} of the whole storage behind "
                     f"`{self.names[nearest]}`, guard bands included")
        verb = "store(s)" if write else "load(s)"
        return (f"{count} {verb} addressed memory outside every tensor passed to the kernel; {where}. "
                "The kernel was stopped before that access.")


class _FencedInterpreter:
    """Stands in for Triton's C++ interpreter module: memory functions checked, the rest passed through."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.launches: list[_Launch] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def _check(self, ptrs: Any, mask: Any, itemsize: int, stray: type[StrayAccess]) -> None:
        if self.launches:
            launch = self.launches[-1]
            launch.check(ptrs, mask, itemsize, stray)
            if launch.traffic is not None:
                launch.traffic.note(ptrs, mask, itemsize, is_load=stray is StrayRead)

    def load(self, ptrs: Any, mask: Any, other: Any, dtype: Any) -> Any:
        self._check(ptrs, mask, np.dtype(dtype).itemsize, StrayRead)
        return self._real.load(ptrs, mask, other, dtype)

    def store(self, ptrs: Any, value: Any, mask: Any) -> Any:
        self._check(ptrs, mask, np.asarray(value).dtype.itemsize, StrayWrite)
        return self._real.store(ptrs, value, mask)

    def atomic_cas(self, ptr: Any, cmp: Any, val: Any, sem: Any) -> Any:
        if self.launches:  # checked, not counted: the performance traps look at loads and stores
            self.launches[-1].check(ptr, None, np.asarray(val).dtype.itemsize, StrayWrite)
        return self._real.atomic_cas(ptr, cmp, val, sem)

    def atomic_rmw(self, op: Any, ptr: Any, val: Any, mask: Any, sem: Any) -> Any:
        if self.launches:
            self.launches[-1].check(ptr, mask, np.asarray(val).dtype.itemsize, StrayWrite)
        return self._real.atomic_rmw(op, ptr, val, mask, sem)


_FENCE: list[_FencedInterpreter] = []


def install() -> bool:
    """Put the fence in front of Triton's interpreter memory functions (once); False where this Triton
    has no such module (the fence is then off and only the guard bands remain)."""
    if _FENCE:
        return True
    try:
        from triton.runtime import interpreter
    except ImportError:  # pragma: no cover - every supported triton has it
        return False
    real = getattr(interpreter, "_interpreter", None)
    if real is None or not all(hasattr(real, f) for f in ("load", "store", "atomic_cas", "atomic_rmw")):
        return False
    fence = _FencedInterpreter(real)
    interpreter._interpreter = fence  # type: ignore[attr-defined]
    _FENCE.append(fence)
    return True


@contextlib.contextmanager
def launch(kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[None]:
    """While this launch (or an autotune/heuristics level of it) runs, only its tensors' storages are
    reachable; while a request counts traffic (grader/running/worker/traffic.py), the top level's loads and
    stores are counted, those of its inner levels with them. No-op where the fence is not installed."""
    if not _FENCE:
        yield
        return
    fence = _FENCE[0]
    checked = _Launch(_storage_ranges(kernel, args, kwargs))
    top = not fence.launches
    if top:
        checked.traffic = traffic.begin(_kernel_name(kernel), checked.names, checked.starts)
    else:
        checked.traffic = fence.launches[0].traffic
        if checked.traffic is not None:
            checked.traffic.next_run()
    fence.launches.append(checked)
    try:
        yield
    finally:
        fence.launches.pop()
        if top:
            traffic.end(checked.traffic)


def _storage_ranges(kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[int, int, str]]:
    names = _param_names(kernel)
    named = [(names[i] if i < len(names) else f"argument {i + 1}", a) for i, a in enumerate(args)]
    named += list(kwargs.items())
    ranges: dict[int, tuple[int, int, str]] = {}
    for name, value in named:
        for tensor in _tensors(value):
            storage = tensor.untyped_storage()
            start = int(storage.data_ptr())
            if start and start not in ranges:
                ranges[start] = (start, start + int(storage.nbytes()), name)
    return list(ranges.values())


def _tensors(value: Any, depth: int = 0) -> list[torch.Tensor]:
    """Tensors in a kernel argument: a tensor, a tuple of them, or a tensor descriptor's base."""
    if isinstance(value, torch.Tensor):
        return [value] if value.layout == torch.strided and value.device.type != "meta" else []
    if isinstance(value, (tuple, list)) and depth < 4:
        return [t for v in value for t in _tensors(v, depth + 1)]
    base = getattr(value, "base", None)
    return _tensors(base, depth + 1) if isinstance(base, torch.Tensor) and depth < 4 else []


def _kernel_name(kernel: Any) -> str:
    fn = kernel
    for _ in range(10):
        if inspect.isfunction(fn) or not hasattr(fn, "fn"):
            break
        fn = fn.fn
    return str(getattr(fn, "__name__", "?"))


def _param_names(kernel: Any) -> list[str]:
    fn = kernel
    for _ in range(10):
        if inspect.isfunction(fn) or not hasattr(fn, "fn"):
            break
        fn = fn.fn
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []
