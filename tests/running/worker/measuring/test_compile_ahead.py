"""grader/running/worker/measuring/compile_ahead.py: a timer compiles a case's planned launches before their first run,
bound to stand-ins that Triton specialises as it will the run's buffers, allocating nothing at the timed size."""

from __future__ import annotations

import pytest
import torch
from triton.backends.nvidia.compiler import CUDABackend
from triton.runtime.jit import native_specialize_impl

from grader.running import protocol
from grader.running.worker.measuring.compile_ahead import PlannedView, compile_launches, stand_in
from grader.running.worker.measuring.planned_launches import time_launches


def _view(dtype: str, shape: list[int], stride: list[int], offset: int) -> dict[str, object]:
    return {"tensor": {"sid": 3, "dtype": dtype, "shape": shape, "stride": stride, "offset": offset}}


def _specialisation(arg: object) -> tuple[str, str]:
    """What Triton 3.6 keys a compiled kernel on for one argument (its type and alignment), as the CUDA backend sees it."""
    return native_specialize_impl(CUDABackend, arg, False, True, True)


@pytest.mark.parametrize("dtype,offset", [("float32", 0), ("float32", 1), ("float32", 4), ("float16", 3),
                                          ("float16", 8), ("bfloat16", 0), ("int32", 2)])
def test_a_stand_in_specialises_as_the_runs_buffer_at_that_offset(dtype: str, offset: int) -> None:
    """The timer's buffers start aligned (the caching allocator's blocks); a view's offset decides its alignment, and
    with it which specialisation the run compiles: the stand-in must ask for the same one, or the check compiles
    again."""
    torch_dtype = getattr(torch, dtype)
    buffer = torch.zeros(64, dtype=torch_dtype)
    real = buffer[offset:offset + 16]
    made = stand_in(_view(dtype, [16], [1], offset))
    assert isinstance(made, PlannedView)
    assert _specialisation(made) == _specialisation(real)
    assert made.dtype is torch_dtype and made.shape == [16] and made.stride() == (1,) and made.stride(0) == 1


def test_other_arguments_stand_for_themselves() -> None:
    import triton.language as tl

    assert stand_in(8192) == 8192 and stand_in(1e-5) == 1e-5 and stand_in(None) is None
    assert stand_in({"dtype": "bfloat16"}) is torch.bfloat16
    assert stand_in({"tl_dtype": "fp16"}) == tl.float16
    assert _specialisation(stand_in(8192)) == _specialisation(8192)  # ints keep their divisibility by 16
    assert _specialisation(stand_in(1000)) == _specialisation(1000)


def test_off_cuda_nothing_compiles_and_nothing_is_looked_up() -> None:
    looked_up: list[str] = []

    def find(name: str) -> object:
        looked_up.append(name)
        raise AssertionError("the interpreter compiles nothing")

    request = protocol.TimeLaunches(inputs=(), buffers={}, outputs=(), compile_only=True,
                                    launches=({"kernel": "k", "grid": [1], "args": [], "kwargs": {}},))
    reply = compile_launches(find, request, torch.device("cpu"))
    assert reply.ok and reply.sets == 0 and reply.outputs == () and reply.medians_ms == ()
    assert looked_up == []
    assert time_launches(find, request, torch.device("cpu")) == reply  # the timer's request takes this path
