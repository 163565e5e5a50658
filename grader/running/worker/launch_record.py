"""Inside the worker: record each kernel launch a wrapper makes, completely enough to replay it.

A wrapper's outputs are only worth points if its kernel launches produced them. Code running in the
worker can switch off any in-process recorder or forge the worker's reply, so the grader does not
take the worker's word for it: it replays the recorded launches in a fresh worker that runs no
wrapper code (grader/judging/replay.py) and compares. For that each record holds:

- the bytes of every storage a launch's tensor arguments live in, as they were when the top-level
  launch began (before any autotuning ran the kernel);
- the innermost JIT call that really ran (the chosen autotune config and heuristics values
  included) with its concrete grid;
- each tensor argument as (storage, offset, shape, stride, dtype).

Storages are named by their data pointer; the tensors are kept alive until the wrapper returns, so
no pointer is reused for a different buffer within one call.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
import triton.language as tl
from torch.utils._python_dispatch import _disable_current_modes

from grader.evidence.tensor_views import tensor_from

PLAIN_TYPES = (int, float, bool, str, type(None))


def storage_id(tensor: torch.Tensor) -> int:
    return int(tensor.untyped_storage().data_ptr())


def storage_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The whole storage under a tensor, as uint8 on the CPU (a copy)."""
    flat = torch.empty(0, dtype=torch.uint8, device=tensor.device)
    flat.set_(tensor.untyped_storage())
    return flat.detach().to("cpu").clone()


def describe_tensor(tensor: torch.Tensor) -> dict[str, Any]:
    return {
        "sid": storage_id(tensor),
        "offset": int(tensor.storage_offset()),
        "shape": list(tensor.shape),
        "stride": list(tensor.stride()),
        "dtype": str(tensor.dtype).replace("torch.", ""),
    }


def _tensors_in(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    return [v for v in list(args) + list(kwargs.values()) if isinstance(v, torch.Tensor)]


class LaunchRecord:
    """One top-level launch: started with the storages snapshotted, finished with the final JIT call."""

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any], keep: list[torch.Tensor],
                 describe: Callable[[torch.Tensor], Any] = storage_bytes) -> None:
        """`describe(tensor)`: what to keep of a storage as the launch begins; by default its bytes
        (the replay check reloads them), for a timed run a description
        (grader.running.worker.measuring.planned_launches)."""
        self.snapshots: dict[int, Any] = {}
        self.final: dict[str, Any] | None = None
        self.grid: Any = None
        self.describe = describe
        with _disable_current_modes():
            for tensor in _tensors_in(args, kwargs):
                keep.append(tensor)
                sid = storage_id(tensor)
                if sid not in self.snapshots:
                    self.snapshots[sid] = describe(tensor)

    def innermost_call(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Note the JIT call about to run (the last one wins: autotune benchmarks come first); return
        its kwargs with the grid wrapped so the grid Triton computes is recorded too."""
        grid = kwargs.get("grid")
        self.final = {
            "fn": fn,
            "args": args,
            "kwargs": {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")},
        }
        if callable(grid):

            def recording_grid(meta: Any, _grid: Any = grid) -> Any:
                value = _grid(meta)
                self.grid = value
                return value

            return dict(kwargs, grid=recording_grid)
        self.grid = grid
        return kwargs

    def encode(self) -> dict[str, Any]:
        """The record as plain data for the grader (tensors become storage references)."""
        if self.final is None:
            return {"complete": False, "why": "no JIT call ran"}
        problems: list[str] = []

        def encode_value(value: Any) -> Any:
            if type(value) is torch.Tensor:
                if storage_id(value) not in self.snapshots:
                    with _disable_current_modes():
                        self.snapshots[storage_id(value)] = self.describe(value)
                return {"tensor": describe_tensor(value)}
            if isinstance(value, tl.constexpr):
                value = value.value
            if isinstance(value, PLAIN_TYPES):
                return value
            if isinstance(value, tl.dtype):
                return {"tl_dtype": value.name}
            if isinstance(value, torch.dtype):
                return {"dtype": str(value).replace("torch.", "")}
            problems.append(f"an argument of type {type(value).__name__}")
            return None

        fn = self.final["fn"]
        args = [encode_value(a) for a in self.final["args"]]
        kwargs = {k: encode_value(v) for k, v in self.final["kwargs"].items()}
        grid = _concrete_grid(self.grid)
        if grid is None:
            problems.append(f"a grid that is not a tuple of ints ({self.grid!r:.60})")
        name = getattr(getattr(fn, "fn", None), "__name__", None)
        return {
            "complete": not problems and name is not None,
            "why": "; ".join(problems),
            "kernel": name,
            "params": list(getattr(fn, "arg_names", []) or []),
            "constexprs": constexpr_params(fn),
            "grid": grid,
            "args": args,
            "kwargs": kwargs,
            "storages": self.snapshots,
        }


def constexpr_params(fn: Any) -> list[str]:
    """The names of a kernel's tl.constexpr parameters (its block sizes and other meta-parameters), from
    the JIT function's parameters, or (the interpreter's InterpretedFunction) the annotations as written."""
    params = getattr(fn, "params", None)
    if params:
        return [str(p.name) for p in params if getattr(p, "is_constexpr", False)]
    try:
        from triton.runtime.jit import _normalize_ty

        signature = inspect.signature(getattr(fn, "fn", fn))
    except (ImportError, TypeError, ValueError):
        return []
    names = []
    for name, param in signature.parameters.items():
        if param.annotation is param.empty:
            continue
        try:
            kind = str(_normalize_ty(param.annotation))
        except Exception:  # an annotation Triton cannot read is not a constexpr it knows
            kind = ""
        if "constexpr" in kind:
            names.append(name)
    return names


def _concrete_grid(grid: Any) -> list[int] | None:
    if isinstance(grid, int) and not isinstance(grid, bool):
        grid = (grid,)
    if not isinstance(grid, (tuple, list)) or not 1 <= len(grid) <= 3:
        return None
    try:
        values = [int(g) for g in grid]
    except (TypeError, ValueError):
        return None
    return values if all(v >= 0 for v in values) else None


def decode_value(value: Any, buffers: dict[int, torch.Tensor]) -> Any:
    if isinstance(value, dict) and "tensor" in value:
        return tensor_from(buffers, value["tensor"])
    if isinstance(value, dict) and "dtype" in value:
        return getattr(torch, value["dtype"])
    if isinstance(value, dict) and "tl_dtype" in value:
        return tl.dtype(value["tl_dtype"])
    return value
