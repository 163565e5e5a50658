"""Where a case's tensors sit: each input and output in its own guarded storage (grader.running.guards), with
row gaps for "row-gap" layouts, the two dimensions before the last swapped in storage for "swapped-heads" ones
(tensors of three or more dimensions), a sentinel gap after each row of an output, guard bands sized from the
launch's reach. Pure: builds the storages the battery sends, and says how the worker must view them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from grader.authoring.problem import In, Out
from grader.authoring.spec import Case, KernelSpec
from grader.running import guards
from grader.running.cases.arguments import buffer_key

OUTPUT_ROW_GAP = 1  # an output's sentinel gap after each row (place_buffers)

# Row gaps for "row-gap" layouts: distinct per buffer so a kernel that mixes up two strides is seen.
ROW_GAPS = (3, 5, 7, 11, 13, 17, 19, 23)

@dataclass(frozen=True)
class Placed:
    plans: dict[str, guards.BufferPlan]  # keyed by buffer key
    storages: list[torch.Tensor]
    keys: list[str]

    def reference(self, ref: In | Out) -> dict[str, int]:
        """The request names a buffer by its view (grader.running.cases.arguments.Placement)."""
        return {"view": self.keys.index(buffer_key(ref))}

    def stride(self, ref: In | Out, dim: int) -> int:
        return self.plans[buffer_key(ref)].view_stride[dim]

    def row_strides(self) -> dict[str, int]:
        return {p.name: p.row_stride for p in self.plans.values() if p.role == "input"}

    def strides(self) -> dict[str, tuple[int, ...]]:
        """Each input's strides as placed (elements; its view's, transposed inputs' as passed)."""
        return {p.name: p.view_stride for p in self.plans.values() if p.role == "input"}

    def views(self) -> list[dict[str, Any]]:
        out = []
        for index, key in enumerate(self.keys):
            plan = self.plans[key]
            out.append({"storage": index, "shape": list(plan.view_shape), "stride": list(plan.view_stride),
                        "offset": plan.offset})
        return out


def place_buffers(case: Case, refs: list[Any], inputs: Mapping[str, Any],
           param_keys: Mapping[str, str] | None = None, finite_guard: float | None = None,
           grid: tuple[int, ...] | None = None) -> Placed:
    """Put every In/Out referenced by a case into guarded storage (gaps for row-gap layouts).
    An Out with `like=param` shares the row gap (and the swapped dimensions) of the buffer bound to that
    parameter. The guard bands cover the launch's reach (guards.reach): from `grid` and the case's block sizes for the
    grader's own launch of a kernel, from the case's sizes alone for a wrapper (grid None)."""
    plans: dict[str, guards.BufferPlan] = {}
    values: dict[str, torch.Tensor | None] = {}
    dtypes: dict[str, torch.dtype] = {}
    keys: list[str] = []
    swapped = case.layout == "swapped-heads"
    for ref in refs:
        key = buffer_key(ref)
        if key in plans:
            continue
        if isinstance(ref, In):
            value = inputs[ref.name]
            shape = tuple(value.T.shape) if ref.transpose else tuple(value.shape)
            gap = ROW_GAPS[len(keys) % len(ROW_GAPS)] if case.layout == "row-gap" else 0
            plan = guards.plan_buffer(ref.name, "input", shape, gap, transpose=ref.transpose, swapped=swapped)
            values[key], dtypes[key] = (value.T if ref.transpose else value), value.dtype
        else:
            like = plans.get((param_keys or {}).get(ref.like or "", ""))
            if like is not None:  # the layout of the buffer bound to `like`: its gap, and swapped if it is
                gap, swap = like.row_stride - like.cols, like.swapped
            else:
                # An output with a layout of its own always gets a sentinel gap after each row: a
                # store that runs past the end of a row is then an out-of-bounds write, not a
                # silent (and, on a GPU, racy) overwrite of the next row's first elements.
                gap = ROW_GAPS[len(keys) % len(ROW_GAPS)] if case.layout == "row-gap" else OUTPUT_ROW_GAP
                swap = swapped
            plan = guards.plan_buffer(ref.name, "output", ref.shape, gap, swapped=swap)
            values[key], dtypes[key] = None, ref.dtype
        plans[key] = plan
        keys.append(key)
    sizes = [*case.dims.values(), *(n for p in plans.values() for n in (p.rows, p.cols))]
    reach = guards.reach(sizes, [p.row_stride for p in plans.values()], grid,
                         [v for v in case.meta.values() if isinstance(v, int)])
    storages = []
    for key in keys:
        plan = plans[key] = dataclasses.replace(
            plans[key], guard=guards.guard_elements(reach, plans[key].rows * plans[key].row_stride))
        storages.append(guards.build_storage(plan, dtypes[key], values[key],
                                             finite_guard))
    return Placed(plans, storages, keys)


def launch_grid(spec: KernelSpec, binding: Mapping[str, Any], case: Case) -> tuple[int, ...] | None:
    """The grid of the grader's launch of a kernel case (the contract's expressions over the case's
    scalar arguments and block sizes), or None where it cannot be evaluated here."""
    scope: dict[str, Any] = {k: v for k, v in binding.items() if isinstance(v, int) and not isinstance(v, bool)}
    scope.update(case.meta)
    scope.update({"cdiv": lambda a, b: -(-a // b), "next_power_of_2": lambda n: 1 << max(0, n - 1).bit_length(),
                  "max": max, "min": min})
    try:
        return tuple(int(eval(expr, {"__builtins__": {}}, scope)) for expr in spec.grid)  # noqa: S307
    except Exception:  # an expression over names this case does not bind: size the guards as for a wrapper
        return None
