"""Inside the worker, interpreter only: check the promises a kernel makes to the compiler.

`tl.multiple_of(x, n)`, `tl.max_contiguous(x, n)` and `tl.max_constancy(x, n)` are hints: the GPU
compiler believes them without checking (they become the value's AxisInfo, `tt.divisibility`,
`tt.contiguity`, `tt.constancy`) and vectorises loads and stores on their word. A false one is
undefined behaviour: on the H200 a matmul whose `% M`-wrapped offsets were promised contiguous and
aligned faulted with `CUDA error: misaligned address` on odd shapes. Triton's interpreter ignores
hints, so this module checks each one against the values the interpreter computed.

What each hint promises, per dimension d of x (Triton's AxisInfo, include/triton/Analysis/AxisInfo.h):

* contiguity C: along d, x splits into groups of C elements (starting at indices 0, C, 2C, ...), each a
  run of consecutive integers (x[i + 1] = x[i] + 1);
* divisibility n: the first element of every such group (of the value's contiguity) is a multiple of
  n; for a value whose contiguity is 1, every element;
* constancy C: groups of C elements that are all equal.

`multiple_of` alone leaves the contiguity to the compiler's own analysis, which the interpreter does
not have. The check uses the largest contiguity the values really have: the compiler's, being sound,
is never larger, and a smaller one only makes the promise stronger. So a claim flagged here is false
whatever the compiler inferred, and a true claim is never flagged. Where `max_contiguous` is applied
to the same value too (the `tl.max_contiguous(tl.multiple_of(x, n), n)` idiom), the compiler uses the
promised contiguity, and so does the check. Hints on pointers are not checked: the interpreter's
addresses are the CPU's, not the GPU's.

`HintLog` keeps the first counterexample of one request (the harness resets it before each launch
or call and returns it with the reply); `checking_set_attr` is the interpreter patch that feeds it.
"""

from __future__ import annotations

import functools
import linecache
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# The attribute each hint sets on the interpreter's TensorHandle, and the hint's tl name.
HINT_ATTRS = {"tt.divisibility": "multiple_of", "tt.contiguity": "max_contiguous", "tt.constancy": "max_constancy"}
SHOWN_VALUES = 16  # values of the offending group sent back with a counterexample


@dataclass
class HintLog:
    """The first false hint since the last reset (plain data: it goes into the worker's reply)."""

    first: dict[str, Any] | None = None

    def reset(self) -> None:
        self.first = None

    def record(self, counterexample: dict[str, Any]) -> None:
        if self.first is None:
            self.first = counterexample


# --------------------------------------------------------------------------- the semantics (pure)


def _lines(data: np.ndarray, dim: int) -> np.ndarray:
    """`data` with dimension `dim` last, flattened to (lines, length)."""
    moved = np.moveaxis(data, dim, -1)
    return moved.reshape(-1, moved.shape[-1])


def _groups_hold(lines: np.ndarray, size: int, step: int) -> np.ndarray:
    """Per group of `size` (aligned at multiples of `size`): does each element follow the one before by
    `step`? Shape (lines, groups); the last group may be shorter."""
    count, length = lines.shape
    groups = -(-length // size)
    # steps[:, j] is x[j + 1] - x[j] == step: step j lies in group j // size, and the last step of each
    # group (j % size == size - 1) crosses into the next one; missing steps past the end hold.
    steps = np.ones((count, groups * size), dtype=bool)
    steps[:, : length - 1] = np.diff(lines.astype(np.int64), axis=1) == step
    return np.asarray(steps.reshape(count, groups, size)[:, :, : size - 1].all(axis=2))


def actual_runs(data: np.ndarray, dim: int, step: int = 1) -> int:
    """The largest power of two C (at most the length of `dim`) such that `data` splits along `dim` into
    aligned groups of C whose elements follow each other by `step` (1: contiguity, 0: constancy)."""
    lines = _lines(data, dim)
    length = lines.shape[1]
    size = 1
    while size * 2 <= length and bool(_groups_hold(lines, size * 2, step).all()):
        size *= 2
    return size


def _index(shape: tuple[int, ...], dim: int, line: int, position: int) -> list[int]:
    """The index in `data` of element `position` of flattened line `line` along `dim`."""
    others = [s for d, s in enumerate(shape) if d != dim]
    rest = [int(i) for i in np.unravel_index(line, others)] if others else []
    rest.insert(dim, position)
    return rest


def _group_values(lines: np.ndarray, line: int, start: int, size: int) -> list[int]:
    return [int(v) for v in lines[line, start: start + min(size, SHOWN_VALUES)]]


def broken_group(data: np.ndarray, dim: int, size: int, step: int) -> dict[str, Any] | None:
    """The first aligned group of `size` along `dim` that is not a run by `step`, or None."""
    lines = _lines(data, dim)
    ok = _groups_hold(lines, size, step)
    if bool(ok.all()):
        return None
    line, group = (int(i) for i in np.argwhere(~ok)[0])
    start = group * size
    return {"dim": dim, "index": _index(data.shape, dim, line, start), "group": size,
            "values": _group_values(lines, line, start, size)}


def undivisible(data: np.ndarray, dim: int, size: int, divisor: int) -> dict[str, Any] | None:
    """The first group start (groups of `size` along `dim`) that is not a multiple of `divisor`, or None."""
    lines = _lines(data, dim).astype(np.int64)
    starts = lines[:, ::size]
    bad = starts % divisor != 0
    if not bool(bad.any()):
        return None
    line, group = (int(i) for i in np.argwhere(bad)[0])
    start = group * size
    return {"dim": dim, "index": _index(data.shape, dim, line, start), "group": size,
            "value": int(starts[line, group]), "values": _group_values(lines, line, 0, lines.shape[1])}


def _clamped(values: Sequence[int], shape: tuple[int, ...]) -> list[int]:
    """Promised group sizes, at most each dimension's length (a promise past the end says nothing more)."""
    return [max(1, min(int(v), length)) for v, length in zip(values, shape, strict=True)]


def check_hint(data: np.ndarray, hint: str, values: Sequence[int],
               attrs: Mapping[str, Sequence[int]]) -> dict[str, Any] | None:
    """Is `hint` (one of HINT_ATTRS' values) with `values` true of the integer block `data`? None when it
    is; else the first counterexample. `attrs` are the hints already on the same value (the interpreter's
    handle attributes), so that `multiple_of` and `max_contiguous` on one value are read together."""
    data = np.asarray(data)
    if data.ndim == 0:
        data = data.reshape(1)
    if len(values) != data.ndim:  # a scalar is held as one element; Triton wants one value per dimension
        return None
    shape = tuple(int(s) for s in data.shape)
    if hint == "max_contiguous" or hint == "max_constancy":
        step = 1 if hint == "max_contiguous" else 0
        for dim, size in enumerate(_clamped(values, shape)):
            found = broken_group(data, dim, size, step)
            if found:
                return dict(found, hint=hint, claimed=[int(v) for v in values], problem="run" if step else "constant")
        divisors = attrs.get("tt.divisibility")
        if hint == "max_contiguous" and divisors is not None and len(divisors) == data.ndim:
            return _check_divisibility(data, divisors, _clamped(values, shape), "multiple_of")
        return None
    if hint == "multiple_of":
        promised = attrs.get("tt.contiguity")
        if promised is not None and len(promised) == data.ndim:
            sizes = _clamped(promised, shape)
        else:
            sizes = [actual_runs(data, dim) for dim in range(data.ndim)]
        return _check_divisibility(data, values, sizes, hint)
    return None


def _check_divisibility(data: np.ndarray, divisors: Sequence[int], sizes: Sequence[int],
                        hint: str) -> dict[str, Any] | None:
    for dim, (divisor, size) in enumerate(zip(divisors, sizes, strict=True)):
        if int(divisor) <= 0:
            continue
        found = undivisible(data, dim, size, int(divisor))
        if found:
            return dict(found, hint=hint, claimed=[int(d) for d in divisors], problem="multiple")
    return None


# --------------------------------------------------------------------------- the interpreter patch


def _is_integer_block(handle: Any) -> bool:
    dtype = getattr(handle, "dtype", None)
    try:
        if dtype is None or dtype.is_ptr() or not dtype.is_int():
            return False
    except AttributeError:
        return False
    return np.issubdtype(np.asarray(handle.data).dtype, np.integer)


@functools.lru_cache(maxsize=1)
def _not_the_code() -> tuple[str, frozenset[str]]:
    """Triton's folder and the grader's shim files: frames there are not where a hint was written."""
    import triton

    here = Path(__file__).resolve()
    shims = frozenset({str(here), str(here.with_name("interpreter_compat.py"))})
    return str(Path(triton.__file__).resolve().parent), shims


def _call_site(frame: Any) -> dict[str, Any]:
    """Where the hint was written (the innermost frame outside Triton and the grader) and the kernel the
    interpreter is running (its GridExecutor's function)."""
    triton_dir, own_files = _not_the_code()
    site: dict[str, Any] = {}
    kernel = ""
    while frame is not None:
        filename = frame.f_code.co_filename
        if not site and not filename.startswith(triton_dir) and filename not in own_files:
            line = frame.f_lineno or 0
            site = {"file": Path(filename).name, "line": int(line), "function": frame.f_code.co_name,
                    "code": linecache.getline(filename, line).strip()[:200]}
        owner = frame.f_locals.get("self") if frame.f_code.co_name == "__call__" else None
        if owner is not None and type(owner).__name__ == "GridExecutor":
            kernel = getattr(getattr(owner, "fn", None), "__name__", "") or ""
            break
        frame = frame.f_back
    return dict(site, kernel=kernel)


def checking_set_attr(original: Callable[..., None], log: HintLog) -> Callable[..., None]:
    """`TensorHandle.set_attr`, through which the interpreter's multiple_of / max_contiguous /
    max_constancy store their promise, checking the promise against the handle's values first."""

    @functools.wraps(original)
    def set_attr(self: Any, key: str, value: Any) -> None:
        hint = HINT_ATTRS.get(key)
        if hint is not None and log.first is None and _is_integer_block(self):
            try:
                values = [int(v) for v in value]
                found = check_hint(self.data, hint, values, dict(getattr(self, "attr", {}) or {}))
            except (TypeError, ValueError):
                found = None  # a promise this check cannot read is left to the compiler
            if found is not None:
                from triton.runtime import interpreter

                program = getattr(interpreter.interpreter_builder, "grid_idx", ())
                log.record(dict(found, program=[int(p) for p in program], **_call_site(sys._getframe(1))))
        original(self, key, value)

    return set_attr


__all__ = ["HINT_ATTRS", "HintLog", "actual_runs", "broken_group", "check_hint", "checking_set_attr", "undivisible"]
