"""Inside the worker: what one wrapper call did. Its top-level kernel launches (each recorded completely enough
to replay, grader.running.worker.launch_record), the torch operators it ran, and its own allocations: poisoned,
and for correctness calls placed inside guard bands a store past them changes (grader.running.guards)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
import triton
from torch.utils._python_dispatch import TorchDispatchMode

from grader.evidence import guard_bits
from grader.running import guards
from grader.running.protocol import ALLOCATION_LINE
from grader.running.worker import fence, progress
from grader.running.worker.kernels import TUNERS, kernel_function
from grader.running.worker.launch_record import LaunchRecord, describe_tensor, storage_bytes
from grader.running.worker.measuring.planned_launches import note_freshness


class Recorder:
    """What one wrapper call did: kernel launches (top level only) and torch operators."""

    active: Recorder | None = None

    def __init__(self, replayable: bool = True, describe: Callable[[torch.Tensor], Any] = storage_bytes) -> None:
        self.launches: list[dict[str, Any]] = []
        self.torch_ops: dict[str, int] = {}
        self.depth = 0
        self.replayable = replayable  # keep what a replay needs (storage snapshots): correctness sizes only
        self.describe = describe  # what a launch record keeps of each storage (timed runs: a description)
        self.current: LaunchRecord | None = None
        self.keep: list[torch.Tensor] = []  # every tensor a launch saw, alive until the call returns
        self.fresh: set[int] = set()  # storages allocated uninitialised and not written by torch since
        # Correctness calls: the wrapper's own float allocations, each placed inside guard bands
        # (grader.running.guards.guard_allocation) and checked when the call returns. None: not guarded.
        self.allocations: list[guards.AllocationGuard] | None = None
        self.announce = False  # under compute-sanitizer: print each allocation's address (ALLOCATION_LINE)


def patch_kernel_runs() -> None:
    """Count launches by wrapping `run` of every KernelInterface class (works in the interpreter,
    where Triton's launch hooks do not fire, and on the GPU; autotune benchmarking and heuristics
    nest inside one top-level run and count once)."""
    todo = [triton.runtime.KernelInterface]
    classes = []
    while todo:
        cls = todo.pop()
        classes.append(cls)
        todo.extend(cls.__subclasses__())
    for cls in classes:
        original = cls.__dict__.get("run")
        if original is None or getattr(original, "_grader_wrapped", False):
            continue

        def run(self, *args, __original=original, **kwargs):
            if not kwargs.get("warmup"):
                progress.mark(progress.LAUNCH)
            with fence.launch(self, args, kwargs):  # interpreter: only these tensors' storages are reachable
                return _recorded_run(self, __original, args, kwargs)

        run._grader_wrapped = True  # type: ignore[attr-defined]
        cls.run = run  # type: ignore[method-assign]


def _recorded_run(self: Any, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """One launch through a wrapped `run`: recorded (top level only) while a wrapper call is recorded."""
    rec = Recorder.active
    if rec is None or kwargs.get("warmup"):
        return original(self, *args, **kwargs)
    top = rec.depth == 0
    rec.depth += 1  # from here on, torch operators the recording itself runs are not counted
    try:
        if top:
            grid = kwargs.get("grid")
            rec.launches.append({"kernel": getattr(kernel_function(self), "__name__", "?"),
                                 "grid": repr(grid)[:80]})
            rec.current = LaunchRecord(args, kwargs, rec.keep, rec.describe) if rec.replayable else None
        if rec.current is not None and not isinstance(self, TUNERS):
            kwargs = rec.current.innermost_call(self, args, kwargs)
        return original(self, *args, **kwargs)
    finally:
        rec.depth -= 1
        if top and rec.current is not None:
            rec.launches[-1]["replay"] = rec.current.encode()
            rec.current = None


_ALLOCATIONS = {"aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty", "aten.new_empty_strided"}
# Allocations that start with values: guarded like the others (their values copied into the view).
_FILLED_ALLOCATIONS = {f"aten.{name}" for name in ("zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones",
                                                   "full", "full_like", "new_full")}


class TorchOps(TorchDispatchMode):
    """Records torch operators a wrapper runs, and poisons fresh uninitialised allocations so the
    grader can tell output elements the kernel never wrote (torch.empty would hide them). During a
    correctness call it also puts each float allocation inside guard bands (`_guarded`)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        rec = Recorder.active
        name = str(getattr(func, "overloadpacket", func))
        if rec is not None and rec.depth == 0:
            rec.torch_ops[name] = rec.torch_ops.get(name, 0) + 1
        out = func(*args, **(kwargs or {}))
        if rec is not None and rec.allocations is not None and name in _ALLOCATIONS | _FILLED_ALLOCATIONS:
            out = _guarded(out, rec.allocations, filled=name in _FILLED_ALLOCATIONS)
            if rec.announce:
                _announce_allocation(out)
        if rec is not None:
            note_freshness(rec.fresh, name, args, kwargs, out)
        if name in _ALLOCATIONS and isinstance(out, torch.Tensor) and out.dtype.is_floating_point:
            with torch.no_grad():  # the whole storage: row gaps of a strided allocation too
                whole = torch.empty(0, dtype=out.dtype, device=out.device).set_(out.untyped_storage())
                guard_bits.bits(whole).fill_(guard_bits.nan_pattern(out.dtype, guard_bits.PAYLOAD_OUTPUT_POISON))
        return out


# torch wraps a mode's __torch_dispatch__ (when the class is made) so that Dynamo never compiles inside it; the wrapper
# imports torch._dynamo at its first call: 6 s of a worker's start on an H100 machine (benchmarks/zygote_imports.py),
# and the reason the zygote preloaded it. Nothing here calls a compiled function, so the method runs as written.
_dispatch = TorchOps.__dict__["__torch_dispatch__"]
TorchOps.__torch_dispatch__ = getattr(_dispatch, "__wrapped__", _dispatch)  # type: ignore[method-assign]


def _guarded(out: Any, allocations: list[guards.AllocationGuard], filled: bool) -> Any:
    """A wrapper's float allocation moved into the middle of a poisoned storage with guard bands: a
    store past it lands in a band the worker checks after the call, not in the worker's heap."""
    if (type(out) is not torch.Tensor or not out.dtype.is_floating_point or out.layout != torch.strided
            or out.requires_grad or out.is_nested or out.device.type == "meta"):
        return out
    with torch.no_grad():
        view, allocation = guards.guard_allocation(out)
        if filled:
            view.copy_(out)
    allocations.append(allocation)
    return view


def _announce_allocation(tensor: Any) -> None:
    """Say where a wrapper's allocation lives (its whole storage: guard bands included), for memcheck's
    report to name (grader.running.cases.sanitizer.announced_allocations)."""
    if type(tensor) is not torch.Tensor or tensor.layout != torch.strided or tensor.device.type == "meta":
        return
    storage = tensor.untyped_storage()
    shape = ",".join(str(n) for n in tensor.shape)
    print(f"{ALLOCATION_LINE} {int(storage.data_ptr())} {int(storage.nbytes())} {shape}", file=sys.stderr, flush=True)


def allocation_reports(allocations: list[guards.AllocationGuard]) -> list[dict[str, Any]]:
    """The reply's "allocation_findings" (grader.running.cases.battery.allocation_guard_findings reads them): the
    wrapper's own allocations whose guard bands changed: stores past them (with the storage id
    that result_views gives a returned tensor, so the grader can name it)."""
    found = []
    for allocation in allocations:
        finding = allocation.finding()
        if finding is not None:
            found.append(dict(finding, sid=int(allocation.storage.untyped_storage().data_ptr())))
    return found


def result_views(result: Any) -> list[dict[str, Any] | None]:
    """Where each returned tensor lives (storage, offset, shape, stride), in return order."""
    items = list(result) if type(result) in (tuple, list) else [result]
    views: list[dict[str, Any] | None] = []
    for item in items:
        try:
            plain = (type(item) is torch.Tensor and item.layout == torch.strided and not item.is_nested
                     and item.device.type != "meta")
            views.append(describe_tensor(item) if plain else None)
        except Exception:  # a tensor without a storage of its own: nothing to replay into
            views.append(None)
    return views


def encode_value(value: Any, depth: int = 0) -> Any:
    """A returned value as plain data: exact tensors are copied to the CPU; anything else is described."""
    if type(value) is torch.Tensor and (value.layout != torch.strided or value.is_nested):
        return {"other": f"{'nested' if value.is_nested else str(value.layout).replace('torch.', '')} Tensor",
                "repr": "a tensor without a plain strided layout"}
    if type(value) is torch.Tensor and value.layout == torch.strided and not value.is_nested \
            and value.device.type != "meta":
        return {"tensor": value.detach().to("cpu").clone(), "device": str(value.device),
                "dtype": str(value.dtype), "shape": list(value.shape)}
    if type(value) in (tuple, list) and depth == 0:
        return {"sequence": [encode_value(v, depth + 1) for v in value], "type": type(value).__name__}
    try:
        text = repr(value)[:200]
    except Exception:
        text = "<unprintable>"
    return {"other": type(value).__name__, "repr": text}
