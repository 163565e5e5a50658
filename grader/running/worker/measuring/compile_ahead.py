"""Inside a timer: compile a case's planned launches before their first run, allocating nothing at the timed size.

A timer's first run of a case's launches (the check at the timed size) compiled every kernel there, in a fresh Triton
cache, while the grade held a timing seat and the GPU shared; in a class on an H100 that check took 36 s a grade,
most of it the CPU (docs/performance.md). Here each launch is bound to stand-ins for its tensors (a dtype and an
address with the view's alignment, as Triton's own `MockTensor`) and compiled with `JITFunction.warmup`, in parallel
(Triton's AsyncCompileMode); then each compiled kernel's launcher is built and its module loaded (`_init_handles`),
in parallel too (kernels.compile_in_parallel), which would otherwise happen at the first launch. The check then finds
every specialisation compiled, where the stand-ins specialise as its buffers do (a buffer the allocator aligns, a
view's offset). Nothing here judges: a launch that fails to compile is left for the check, which reports it with the
student's line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from triton.runtime.jit import MockTensor

from grader.running import protocol
from grader.running.worker.kernels import compile_in_parallel
from grader.running.worker.launch_record import decode_value

ALIGNMENT = 16  # Triton specialises a pointer on whether it is a multiple of 16
THREADS = 4  # compiles at once (ptxas runs in a process of its own per compile)


class PlannedView(MockTensor):
    """A stand-in for one tensor view of a planned launch: its dtype, shape and stride, and an address whose alignment
    is the view's (its buffer starts aligned; the view's offset decides)."""

    def __init__(self, dtype: torch.dtype, shape: list[int], stride: list[int], offset_bytes: int) -> None:
        super().__init__(dtype, shape)
        self._stride = tuple(stride)
        self._address = offset_bytes % ALIGNMENT or 0

    def stride(self, *args: Any) -> Any:  # type: ignore[override]
        return self._stride[args[0]] if args else self._stride

    def data_ptr(self) -> int:  # type: ignore[override]
        return self._address


def stand_in(value: Any) -> Any:
    """A planned launch's argument as `warmup` takes it: a tensor view becomes a PlannedView; anything else is decoded
    as the run decodes it (launch_record.decode_value: a dtype, a Triton dtype, a plain value)."""
    if isinstance(value, Mapping) and "tensor" in value:
        described = value["tensor"]
        dtype = getattr(torch, str(described["dtype"]))
        size = torch.empty(0, dtype=dtype).element_size()
        return PlannedView(dtype, list(described["shape"]), list(described["stride"]), int(described["offset"]) * size)
    return decode_value(value, {})


def compile_launches(find_kernel: Callable[[str], Any], request: protocol.TimeLaunches,
                     device: torch.device) -> protocol.Timed:
    """Compile (and load) every planned launch's kernel for the specialisation its run will ask for; nothing runs and
    nothing is allocated at the timed size. The reply's `sets` is how many launches compiled. Off CUDA, nothing."""
    if device.type != "cuda":
        return protocol.Timed(ok=True, outputs=(), sets=0)
    calls = []
    for launch in request.launches:
        try:
            kernel = find_kernel(str(launch["kernel"]))
            args = [stand_in(a) for a in launch["args"]]
            kwargs = {k: stand_in(v) for k, v in launch["kwargs"].items()}
        except Exception:  # noqa: BLE001 - the check's run reports it
            continue
        calls.append((kernel, args, tuple(launch["grid"]), kwargs))
    _, compiled = compile_in_parallel(calls, THREADS)  # compiled, launchers built and modules loaded, in parallel
    return protocol.Timed(ok=True, outputs=(), sets=compiled)
