"""Guarded buffers: every tensor handed to student code lives inside a larger allocation.

Layout of one buffer's storage (elements):

    [ guard band | row 0 | gap | row 1 | gap | ... | row R-1 | gap | guard band ]

Guard bands and row gaps hold a NaN with a recognisable payload: a kernel that reads them leaks NaN
into its output (out-of-bounds read, also into the *neighbouring row*, which a per-buffer check
alone misses), and one that writes them changes their bits (out-of-bounds write). Output interiors
are poisoned with another NaN payload before the call, so elements the kernel never wrote are found
bit-exactly. All checks compare bits through an integer view: a NaN written over a NaN is still seen.

How wide the guard bands are (`reach`, `guard_elements`): wide enough that the stray addresses a launch
can form from its own numbers land in them, not in whatever memory lies beyond (the worker's heap in
the interpreter, other allocations on a GPU). A wrong index is still built from the launch's
quantities: program ids (< the grid), lanes (< a block size), loop counters (< a size such as N) and
strides; `row + j * stride` instead of `row * stride + j` reaches N * stride, not M * stride. So the
band is sized from those numbers, per launch, instead of one large arena for every tensor: the grader
sends each storage to the worker and back, and a wrapper's launch records copy whole storages, so the
bytes moved grow with the band. Bands are capped at GUARD_CAP elements; beyond that the interpreter
worker's fence (grader/running/worker/fence.py) stops any access outside the launch's storages, and
on a GPU such an access faults or is lost with the worker, which the battery replaces after any case
that wrote out of bounds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from grader import trap_ids
from grader.evidence.guard_bits import (
    INPUT_MODIFIED,
    PAYLOAD_INPUT_GUARD,
    PAYLOAD_OUTPUT_GUARD,
    PAYLOAD_OUTPUT_POISON,
    GuardFinding,
    bits,
    nan_pattern,
)

# Guard band widths, in elements: never narrower than GUARD_MIN, never wider than GUARD_CAP (4 MiB of
# float32 on each side of a tensor: what the worker's pipe and a launch record's snapshot can carry).
GUARD_MIN = 256
GUARD_CAP = 1 << 20


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def reach(sizes: Sequence[int], strides: Sequence[int], grid: Sequence[int] | None = None,
          blocks: Sequence[int] = ()) -> int:
    """The farthest element offset, either side of a tensor's start, that a launch's index arithmetic
    can form from these numbers, right or wrong.

    One index along an axis is at most `pid * BLOCK + lane` (pid below the largest grid size, lane below
    the largest block) or a loop counter over a size plus one block (`start + lane`):
    index = max(max(grid) * max(blocks), max(sizes)) + max(blocks). An address adds two such indices,
    each times a stride at most (right: `row * stride + col`; wrong: `row + col * stride`, or both times
    a stride): reach = 2 * index * max(strides).

    `grid=None`: the launch is a wrapper's own, its grid and blocks unknown to the grader. A wrapper
    sizes its grid to cover the tensor (pid * BLOCK stays within a size plus a block) with blocks up to
    next_power_of_2 of the largest size: index = max(sizes) + next_power_of_2(max(sizes)).
    """
    largest = max((int(s) for s in sizes), default=1)
    if grid is None:
        index = largest + _next_power_of_2(largest)
    else:
        block = max((int(b) for b in blocks), default=1)
        index = max(max((int(g) for g in grid), default=1) * block, largest) + block
    return 2 * index * max(1, max((abs(int(s)) for s in strides), default=1))


def guard_elements(reach_elements: int, body: int = 0) -> int:
    """The guard band for a tensor whose storage body spans `body` elements: at least its own length
    (the original rule) and the launch's reach, between GUARD_MIN and GUARD_CAP."""
    return min(GUARD_CAP, max(GUARD_MIN, body, reach_elements))


@dataclass(frozen=True)
class BufferPlan:
    """Where one logical tensor sits inside its guarded storage."""

    name: str
    role: str  # "input" or "output"
    rows: int  # rows of the stored (un-transposed) matrix; 1-D tensors are one row
    cols: int
    row_stride: int
    guard: int
    ndim: int
    transpose: bool = False
    # The leading dimensions of a tensor of more than two (B, H for a (B, H, N, D) tensor): its rows are the
    # product of all dimensions but the last, stored one after another, each followed by the row gap.
    lead: tuple[int, ...] = ()
    # The storage holds the tensor with its two dimensions before the last swapped (a (B, H, N, D) view of a
    # (B, N, H, D) storage: heads interleaved in memory, as a projection's output reshaped for attention is).
    swapped: bool = False

    @property
    def storage_size(self) -> int:
        return 2 * self.guard + self.rows * self.row_stride

    @property
    def stored_shape(self) -> tuple[int, ...]:
        """The shape in storage order (the view's unless `swapped`)."""
        if self.ndim == 1:
            return (self.cols,)
        if self.lead:
            return (*self.lead, self.rows // _product(self.lead), self.cols)
        return (self.rows, self.cols)

    @property
    def view_shape(self) -> tuple[int, ...]:
        if self.lead:
            return _swap(self.stored_shape) if self.swapped else self.stored_shape
        if self.ndim == 2 and self.transpose:
            return (self.cols, self.rows)
        return self.stored_shape

    @property
    def view_stride(self) -> tuple[int, ...]:
        if self.ndim == 1:
            return (1,)
        if self.lead:
            strides = [1, self.row_stride]
            for size in reversed(self.stored_shape[1:-1]):
                strides.append(strides[-1] * size)
            stored = tuple(reversed(strides))
            return _swap(stored) if self.swapped else stored
        return (1, self.row_stride) if self.transpose else (self.row_stride, 1)

    @property
    def offset(self) -> int:
        return self.guard

    def interior_mask(self) -> torch.Tensor:
        """True where the storage holds an element of the logical tensor."""
        mask = torch.zeros(self.storage_size, dtype=torch.bool)
        body = mask[self.guard : self.guard + self.rows * self.row_stride].view(self.rows, self.row_stride)
        body[:, : self.cols] = True
        return mask

    def describe_index(self, flat: int) -> str:
        """Say where a storage index lies, in words a student can act on."""
        if flat < self.guard:
            return f"{self.guard - flat} element(s) before the start of {self.name}"
        end = self.guard + self.rows * self.row_stride
        if flat >= end:
            return f"{flat - end + 1} element(s) past the end of {self.name}'s storage"
        row, col = divmod(flat - self.guard, self.row_stride)
        if col >= self.cols and self.lead:
            where = self.describe_index(self.guard + row * self.row_stride).rsplit(", ", 1)[0]
            return f"in the gap after row {where}, :] (column {col}, row length {self.cols})"
        if col >= self.cols:
            return f"in the gap after row {row} of {self.name} (column {col}, row length {self.cols})"
        if self.ndim == 1:
            return f"{self.name}[{col}]"
        if self.lead:
            index = []
            for size in reversed(self.stored_shape[:-1]):
                row, i = divmod(row, size)
                index.append(i)
            stored = (*reversed(index), col)
            return f"{self.name}[{', '.join(str(i) for i in (_swap(stored) if self.swapped else stored))}]"
        return f"{self.name}[{col}, {row}]" if self.transpose else f"{self.name}[{row}, {col}]"


def plan_buffer(
    name: str, role: str, shape: tuple[int, ...], gap: int, transpose: bool = False, reach_elements: int = 0,
    swapped: bool = False,
) -> BufferPlan:
    """Plan storage for a tensor of logical `shape` (the view's shape) with `gap` spare elements
    after each stored row, and guard bands covering `reach_elements` (see `reach`). `swapped` (tensors of three
    or more dimensions): stored with the two dimensions before the last swapped."""
    if swapped and len(shape) >= 3:
        plan = plan_buffer(name, role, _swap(tuple(shape)), gap, transpose, reach_elements)
        return dataclasses.replace(plan, swapped=True)
    lead: tuple[int, ...] = ()
    if len(shape) == 1:
        rows, cols, ndim = 1, shape[0], 1
        gap = 0
    elif len(shape) == 2:
        rows, cols = (shape[1], shape[0]) if transpose else shape
        ndim = 2
    elif len(shape) > 2 and not transpose:
        # Every dimension but the last is a row index: (B, H, N, D) is B*H*N rows of D, each row followed by
        # the gap, so the strides of the leading dimensions are multiples of the row stride.
        lead, rows, cols, ndim = tuple(shape[:-2]), _product(shape[:-1]), shape[-1], len(shape)
    else:
        raise ValueError(f"{name}: guarded buffers support tensors of one or more dimensions (transposed: two), "
                         f"got shape {shape}")
    row_stride = cols + gap
    guard = guard_elements(reach_elements, rows * row_stride)
    return BufferPlan(name, role, rows, cols, row_stride, guard, ndim, transpose, lead)


def _swap(sizes: tuple[int, ...]) -> tuple[int, ...]:
    """The same sizes (or strides, or an index) with the two dimensions before the last swapped."""
    return (*sizes[:-3], sizes[-2], sizes[-3], sizes[-1])


def _product(sizes: Sequence[int]) -> int:
    out = 1
    for size in sizes:
        out *= int(size)
    return out


def build_storage(
    plan: BufferPlan, dtype: torch.dtype, values: torch.Tensor | None, finite_guard: float | None = None
) -> torch.Tensor:
    """Allocate the guarded storage on the CPU: guards, gaps and (for outputs) poison filled in.

    `finite_guard` fills the guards and gaps with that finite value instead of NaN (an output's interior keeps
    its poison): the probe that tells NaN read from outside a tensor apart from NaN made by arithmetic (0/0,
    sqrt(-1)). Every buffer's, outputs' too: a wild load may land in any of the case's guard bands."""
    storage = torch.empty(plan.storage_size, dtype=dtype)
    guard_payload = PAYLOAD_INPUT_GUARD if plan.role == "input" else PAYLOAD_OUTPUT_GUARD
    if finite_guard is not None:
        storage.fill_(finite_guard)
    else:
        bits(storage).fill_(nan_pattern(dtype, guard_payload))
    view = view_of(storage, plan)
    if plan.role == "input":
        if values is None:
            raise ValueError(f"input {plan.name} needs values")
        view.copy_(values.to(dtype))
    else:
        bits(view).fill_(nan_pattern(dtype, PAYLOAD_OUTPUT_POISON))
    return storage


def view_of(storage: torch.Tensor, plan: BufferPlan) -> torch.Tensor:
    return torch.as_strided(storage, plan.view_shape, plan.view_stride, plan.offset)


def check_storage(plan: BufferPlan, before: torch.Tensor, after: torch.Tensor) -> list[GuardFinding]:
    """Compare one buffer's storage before and after the call, bit for bit."""
    findings = []
    changed = bits(before) != bits(after)
    interior = plan.interior_mask()
    outside = changed & ~interior
    if outside.any():
        idx = torch.nonzero(outside).flatten()
        findings.append(GuardFinding(trap_ids.OOB_WRITE, plan.name, int(idx.numel()), plan.describe_index(int(idx[0]))))
    if plan.role == "input":
        inside = changed & interior
        if inside.any():
            idx = torch.nonzero(inside).flatten()
            findings.append(
                GuardFinding(INPUT_MODIFIED, plan.name, int(idx.numel()), plan.describe_index(int(idx[0])))
            )
    else:
        poison = nan_pattern(after.dtype, PAYLOAD_OUTPUT_POISON)
        unwritten = (bits(after) == poison) & interior
        if unwritten.any():
            idx = torch.nonzero(unwritten).flatten()
            findings.append(
                GuardFinding(trap_ids.UNWRITTEN_OUTPUT, plan.name, int(idx.numel()), plan.describe_index(int(idx[0])))
            )
    return findings


def unwritten_mask(plan: BufferPlan, storage: torch.Tensor) -> torch.Tensor:
    """Boolean mask in the view's shape: True where the output still holds the poison."""
    poison = nan_pattern(storage.dtype, PAYLOAD_OUTPUT_POISON)
    return bits(view_of(storage, plan)) == poison


# --------------------------------------------------------------------------- a wrapper's own allocations


@dataclass(frozen=True)
class AllocationGuard:
    """A tensor a wrapper allocated itself, placed by the worker in the middle of a larger storage
    poisoned throughout (guards and body alike: a fresh buffer is still one repeated value)."""

    storage: torch.Tensor  # the whole storage, guards included, 1-D in the allocation's dtype
    guard: int
    size: int  # elements of the allocation's own storage, between the two guard bands
    shape: tuple[int, ...]

    def finding(self) -> dict[str, object] | None:
        """Plain data on the guard elements that changed since allocation, or None."""
        pattern = nan_pattern(self.storage.dtype, PAYLOAD_OUTPUT_POISON)
        flat = bits(self.storage)
        changed = torch.cat([flat[: self.guard], flat[self.guard + self.size :]]) != pattern
        if not bool(changed.any()):
            return None
        first = int(torch.nonzero(changed)[0])
        return {"guard": self.guard, "size": self.size, "count": int(changed.sum()),
                "first": first if first < self.guard else first + self.size, "shape": list(self.shape)}


def guard_allocation(tensor: torch.Tensor) -> tuple[torch.Tensor, AllocationGuard]:
    """The same tensor (shape, strides, dtype, device; its storage offset shifted by the guard) inside a
    poisoned storage with guard bands sized from its own shape and strides (a wrapper's launch: `reach`
    with grid=None). The caller copies in the values of an initialised allocation (zeros, full)."""
    size = tensor.untyped_storage().nbytes() // tensor.element_size()
    guard = guard_elements(reach(tuple(tensor.shape), tuple(tensor.stride())), size)
    storage = torch.empty(2 * guard + size, dtype=tensor.dtype, device=tensor.device)
    bits(storage).fill_(nan_pattern(tensor.dtype, PAYLOAD_OUTPUT_POISON))
    view = torch.as_strided(storage, tensor.shape, tensor.stride(), guard + tensor.storage_offset())
    return view, AllocationGuard(storage, guard, size, tuple(tensor.shape))


def allocation_guard_finding(found: dict[str, object], name: str) -> GuardFinding | None:
    """The grader's reading of one `AllocationGuard.finding` sent back by the worker (None if malformed)."""
    numbers = [v for v in (found.get(k) for k in ("guard", "size", "count", "first"))
               if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
    if len(numbers) != 4:
        return None
    guard, size, count, first = numbers
    plan = BufferPlan(name, "output", 1, size, size, guard, 1)
    return GuardFinding("oob-write", name, count, plan.describe_index(first))
