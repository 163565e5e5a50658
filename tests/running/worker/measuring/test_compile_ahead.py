"""grader/running/worker/measuring/compile_ahead.py: a timer compiles a case's planned launches before their first run,
bound to stand-ins that Triton specialises as it will the run's buffers, allocating nothing at the timed size."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import triton
import triton.language as tl
from triton.backends.nvidia.compiler import CUDABackend
from triton.runtime.jit import native_specialize_impl

from grader.running import protocol
from grader.running.worker.measuring.compile_ahead import PlannedView, compile_launches, stand_in
from grader.running.worker.measuring.planned_launches import time_launches


@triton.jit
def _scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, 3 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


def _view(dtype: str, shape: list[int], stride: list[int], offset: int) -> dict[str, object]:
    return {"tensor": {"sid": 3, "dtype": dtype, "shape": shape, "stride": stride, "offset": offset}}


def _specialisation(arg: object) -> tuple[str, str]:
    """What Triton 3.6 keys a compiled kernel on for one argument (its type, its alignment), as CUDA's backend does."""
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


def test_the_parallel_compiles_run_between_compile_marks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under AsyncCompileMode each `_do_compile` returns at once and the pool's threads compile after its marks: the
    whole pool is between compile marks, so the grader's deadline credits those seconds as compiling (a class's busy
    CPUs made ptxas outlast the 10 s run window)."""
    from grader.running.worker import progress

    events: list[str] = []
    monkeypatch.setattr(progress, "mark", lambda event: events.append(event.decode()))

    class _Kernel:
        def warmup(self, *args: object, grid: object, **kwargs: object) -> object:
            events.append("compile")
            return None

    request = protocol.TimeLaunches(inputs=(), buffers={}, outputs=(), compile_only=True,
                                    launches=({"kernel": "k", "grid": [1], "args": [1], "kwargs": {}},) * 2)
    reply = compile_launches(lambda name: _Kernel(), request, torch.device("cuda"))
    assert reply.ok and reply.sets == 0  # nothing compiled to load here
    assert events[:4] == ["C", "compile", "compile", "c"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "offset-view"])  # one specialisation each
def test_on_a_gpu_the_run_after_compiling_ahead_compiles_nothing(offset: int) -> None:
    """Compiled ahead from the plan alone, the first run of the same launches finds its specialisation compiled and
    loaded: the kernel's cache holds one more specialisation after both, and compiling allocated no buffer."""
    n = 1 << 20
    x = torch.randn(n + offset)
    view = {"sid": 2, "offset": offset, "shape": [n], "stride": [1], "dtype": "float32"}
    request = protocol.TimeLaunches(
        inputs=(x,), buffers={1: {"input": 0, "nbytes": 4 * x.numel()}, 2: {"fresh": True, "nbytes": 4 * x.numel()}},
        launches=({"kernel": "scale", "grid": [n // 1024],
                   "args": [{"tensor": {**view, "sid": 1}}, {"tensor": view}, n], "kwargs": {"BLOCK": 1024}},),
        outputs=(view,), sets=1)
    device = torch.device("cuda")

    def compiled() -> int:
        return sum(len(cache[0]) for cache in _scale.device_caches.values())

    known = compiled()  # the other parameter's specialisation, where it ran first
    before = torch.cuda.memory_allocated()
    ahead = time_launches(lambda name: _scale, dataclasses.replace(request, compile_only=True), device)
    assert ahead.ok and ahead.sets == 1 and torch.cuda.memory_allocated() == before
    assert compiled() == known + 1
    ran = time_launches(lambda name: _scale, request, device)
    assert ran.ok and compiled() == known + 1  # the run's specialisation was the one compiled ahead
    assert torch.equal(ran.outputs[0], 3 * x[offset:])

