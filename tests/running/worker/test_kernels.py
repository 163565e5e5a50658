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
