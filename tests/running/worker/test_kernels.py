"""grader/running/worker/kernels.py: a symbol described for the grader (a kernel under any Triton wrapper, a
function, its parameters and line, the meta-parameters autotune or heuristics choose), a contract's grid
evaluated with no builtins, and the innermost JIT function a replay runs."""

from __future__ import annotations

import types

import pytest
import triton
import triton.language as tl

from grader.running.worker.kernels import describe_symbol, kernel_function, make_grid, replayable_kernel, tuned_meta


@triton.jit
def copy_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < N), mask=offs < N)


tuned = triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["N"])(copy_kernel)


def wrapper(x, out):
    return out


def test_symbols_are_described() -> None:
    kernel = describe_symbol(tuned)
    assert (kernel["kind"], kernel["triton_class"], kernel["params"]) == ("kernel", True,
                                                                         ["x_ptr", "out_ptr", "N", "BLOCK"])
    assert kernel["tuned"] == ["BLOCK"] and kernel["line"] > 0
    assert describe_symbol(wrapper)["kind"] == "function" and describe_symbol(wrapper)["params"] == ["x", "out"]
    assert describe_symbol(None) == {"kind": "missing"} and describe_symbol(3)["kind"] == "other"
    assert kernel_function(tuned) is copy_kernel.fn and tuned_meta(copy_kernel) == []


def test_a_grid_is_evaluated_with_the_contracts_helpers_only() -> None:
    grid = make_grid(("cdiv(N, BLOCK)", "max(M, 1)"))
    assert grid({"N": 33, "BLOCK": 16, "M": 0}) == (3, 1)
    with pytest.raises(NameError):
        make_grid(("__import__('os').getpid()",))({})


def test_a_replay_runs_the_innermost_jit_function() -> None:
    module = types.SimpleNamespace(copy=tuned, other=wrapper)
    assert replayable_kernel(module, "copy_kernel") is copy_kernel
    with pytest.raises(LookupError, match="no Triton kernel named 'gone'"):
        replayable_kernel(module, "gone")


def test_a_kernels_first_load_is_marked_as_compiling_and_later_launches_are_not() -> None:
    """At a compiled kernel's first run Triton builds its launcher (gcc, where the cache has none for the signature)
    and loads its module, after the launch's progress mark: unmarked, a class's busy CPUs made that read as "nothing
    happened for 5 s after its last kernel launch" (an H100, session 13). It is marked as compiling now; every later
    launch, which loads nothing, writes no mark."""
    import os

    from triton.compiler.compiler import CompiledKernel

    from grader.running.worker import progress
    from grader.running.worker.kernels import _marked_compile, time_jit_compiles

    time_jit_compiles()
    assert getattr(CompiledKernel.__dict__["_init_handles"], "_grader_wrapped", False)
    assert getattr(triton.runtime.JITFunction.__dict__["_do_compile"], "_grader_wrapped", False)
    loads: list[str] = []

    def init_handles(kernel: types.SimpleNamespace) -> None:
        loads.append(kernel.name)
        kernel.module = "loaded"

    marked = _marked_compile(init_handles, lambda kernel: kernel.module is None)
    read, write = os.pipe()
    progress.connect(write)
    try:
        kernel = types.SimpleNamespace(name="k", module=None)
        marked(kernel)
        assert os.read(read, 16) == progress.COMPILE_START + progress.COMPILE_END
        marked(kernel)  # loaded: Triton's own early return, no marks
        os.set_blocking(read, False)
        with pytest.raises(BlockingIOError):
            os.read(read, 16)
        assert loads == ["k", "k"]
    finally:
        progress.connect(-1)
        os.close(read)
        os.close(write)


class _Compiled:
    """Stands in for Triton's CompiledKernel: `_init_handles` takes a while (gcc, the module's load) and may fail."""

    def __init__(self, fails: bool = False) -> None:
        self.fails = fails
        self.threads: list[int] = []

    def _init_handles(self) -> None:
        import threading
        import time

        self.threads.append(threading.get_ident())
        time.sleep(0.2)
        if self.fails:
            raise RuntimeError("out of resources: shared memory")


class _Future:
    def __init__(self, value: object) -> None:
        self.value = value

    def result(self) -> object:
        return self.value


def test_compiled_kernels_are_loaded_in_parallel_once_each_and_a_failure_is_left_for_the_launch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """load_compiled builds launchers and loads modules `threads` at once: each kernel once (a warm-up may return the
    same kernel twice, an autotuned kernel a list, an async compile a future), failures counted out, not raised."""
    import time

    from grader.running.worker import kernels

    monkeypatch.setattr(kernels, "_driver_ready", lambda: True)
    plain, tuned, failing = _Compiled(), [_Compiled(), _Compiled()], _Compiled(fails=True)
    started = time.monotonic()
    loaded = kernels.load_compiled([plain, plain, tuned, _Future(failing), "not a kernel"], threads=4)
    elapsed = time.monotonic() - started
    assert loaded == 3
    assert [len(k.threads) for k in (plain, *tuned, failing)] == [1, 1, 1, 1]
    assert elapsed < 0.6, elapsed  # four loads of 0.2 s at once, not one after another (0.8 s)
    monkeypatch.setattr(kernels, "_driver_ready", lambda: False)
    assert kernels.load_compiled([_Compiled()], threads=4) == 0  # no GPU driver: nothing is loaded ahead


def test_a_gpu_driver_is_ready_where_cuda_is_and_nowhere_else() -> None:
    import torch

    from grader.running.worker.kernels import _driver_ready

    assert _driver_ready() == torch.cuda.is_available()
