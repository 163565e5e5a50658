"""GPU-correct code in Triton's CPU interpreter: the worker's shims (grader/running/worker/interpreter_compat.py)
and the `interpreter-unsupported` trap for what still cannot run.

Unit tests run small kernels through Triton's interpreter in this process (`InterpretedFunction`, with
the shims installed for the test only) and compare each shim with the interpreter's own tl function, or
with torch in float64 where tl has none. The slow tests grade real public kernels, adapted to the
fused_layers contract (tests/data/public_kernels/, each citing its source), through `grader.cli.main`.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import triton.language as tl
from triton.language.extra import libdevice  # the backend-neutral stubs
from triton.language.extra.cuda import libdevice as cuda_libdevice
from triton.runtime.errors import InterpreterError
from triton.runtime.interpreter import InterpretedFunction

from grader.authoring.spec import load_assignment
from grader.cli import main
from grader.evidence.worker_error import WorkerError
from grader.judging.compare import compare
from grader.judging.diagnosis import refute_interpreter_limits
from grader.judging.errors import classify_error
from grader.operations.grade import weigh_interpreter_limits
from grader.results import CaseResult
from grader.running.worker import interpreter_compat
from grader.running.worker.interpreter_compat import LIBDEVICE, InterpreterUnsupported, is_interpreter_limit
from tests.conftest import all_traps

ROOT = Path(__file__).resolve().parents[3]
PUBLIC_KERNELS = ROOT / "tests" / "data" / "public_kernels"
BLOCK = 16
N = 13  # not a power of two: the masked tail is exercised

# (atol, rtol) for a shim against its reference. The shims compute in float64 and round once to float32;
# the interpreter's tl functions compute in float32 numpy (1-2 roundings): they differ by an ulp or two
# (ulp(1) = 1.2e-7). Against torch in float64 the shim is within half an ulp.
TOL_VS_TL = (1e-6, 1e-6)
TOL_VS_TORCH = (1e-6, 1e-6)


@pytest.fixture
def shims():
    with interpreter_compat.installed():
        yield


def launch(fn: Callable[..., None], *args: Any, grid: tuple[int, ...] = (1,), **meta: Any) -> None:
    """Run a plain Python kernel body in Triton's interpreter, as @triton.jit does under TRITON_INTERPRET=1."""
    InterpretedFunction(fn)[grid](*args, **meta)


def inputs(kind: str) -> torch.Tensor:
    """N float32 values in a function's domain, the same on every call."""
    base = torch.linspace(0.25, 4.0, N, dtype=torch.float32)
    if kind == "signed":
        return base - 2.125  # negative, zero-crossing and positive, no exact .5 ties
    if kind == "special":
        return torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 2.5, -3.0, 1e-30,
                             3e38, -1.0, 7.0, float("nan")], dtype=torch.float32)
    return base


# ------------------------------------------------------------------------------------ kernel bodies
# Interpreter-only test kernels: the op is picked by name (getattr), which only the interpreter allows.


def unary_libdevice(x_ptr, y_ptr, n, NAME: tl.constexpr, BLOCK_N: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    tl.store(y_ptr + offs, getattr(libdevice, NAME)(x).to(tl.float32), mask=mask)


def unary_tl(x_ptr, y_ptr, n, NAME: tl.constexpr, BLOCK_N: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    tl.store(y_ptr + offs, getattr(tl, NAME)(x).to(tl.float32), mask=mask)


def binary_libdevice(x_ptr, z_ptr, y_ptr, n, NAME: tl.constexpr, BLOCK_N: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    z = tl.load(z_ptr + offs, mask=mask, other=1.0)
    tl.store(y_ptr + offs, getattr(libdevice, NAME)(x, z).to(tl.float32), mask=mask)


def binary_tl(x_ptr, z_ptr, y_ptr, n, NAME: tl.constexpr, BLOCK_N: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    z = tl.load(z_ptr + offs, mask=mask, other=1.0)
    tl.store(y_ptr + offs, getattr(tl, NAME)(x, z).to(tl.float32), mask=mask)


def fma_both(x_ptr, y_ptr, lib_ptr, tl_ptr, n, BLOCK_N: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    y = tl.load(y_ptr + offs, mask=mask, other=1.0)
    tl.store(lib_ptr + offs, libdevice.fma(x, y, x), mask=mask)
    tl.store(tl_ptr + offs, tl.fma(x, y, x), mask=mask)


def every_libdevice_path(x_ptr, y_ptr, n, BLOCK_N: tl.constexpr):
    """The spellings real kernels use: the backend-neutral stubs, the CUDA module, the tl.extra path."""
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    y = libdevice.rsqrt(x) + cuda_libdevice.rsqrt(x) + tl.extra.cuda.libdevice.rsqrt(x)
    tl.store(y_ptr + offs, y, mask=mask)


def no_cpu_version(x_ptr, y_ptr, n, BLOCK_N: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(y_ptr + offs, libdevice.erfinv(x), mask=offs < n)


def float_argument(x_ptr, y_ptr, n, eps, BLOCK_N: tl.constexpr):
    """`.to` and `.dtype` on a float argument, as Liger-Kernel's norms pin their eps."""
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    pinned = eps.to(tl.float32)
    same = tl.full((), eps, eps.dtype)
    tl.store(y_ptr + offs, x + pinned + same, mask=mask)


erf_alias = tl.math.erf  # module-level aliases of tl builtins, as FlagGems' `erf = tl_extra_shim.erf`
cast_alias = tl.cast  # unsloth's `triton_cast = tl.cast`
LOG2E = tl.constexpr(1.4426950408889634)  # a module-level constexpr (already worked)


def aliases(x_ptr, y_alias_ptr, y_tl_ptr, n, BLOCK_N: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_alias_ptr + offs, erf_alias(x) + cast_alias(n, tl.float32) * LOG2E, mask=mask)
    tl.store(y_tl_ptr + offs, tl.math.erf(x) + n.to(tl.float32) * 1.4426950408889634, mask=mask)


def mixed_mask(x_ptr, y_ptr, n, rows, BLOCK_N: tl.constexpr):
    """A mask that ANDs a block with a scalar comparison: the GPU accepts it."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    mask = (offs < n) & (row < rows)
    x = tl.load(x_ptr + row * n + offs, mask=mask, other=0.0)
    tl.store(y_ptr + row * n + offs, x * 2.0, mask=mask)


def string_annotation(x_ptr, y_ptr, n, BLOCK_N: "tl.constexpr"):  # noqa: UP037 - TorchInductor's spelling
    offs = tl.arange(0, BLOCK_N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)


def inline_asm(x_ptr, y_ptr, n, BLOCK_N: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + offs, mask=offs < n, other=1.0)
    y = tl.inline_asm_elementwise("rsqrt.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
    tl.store(y_ptr + offs, y, mask=offs < n)


def not_a_power_of_two(x_ptr, y_ptr, n, BLOCK_N: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


# ------------------------------------------------------------------------------------ libdevice shims

# libdevice name -> the interpreter's own tl function computing the same thing
TL_TWINS = {
    "rsqrt": "rsqrt", "sqrt": "sqrt", "sqrt_rn": "sqrt_rn", "exp": "exp", "exp2": "exp2", "log": "log",
    "log2": "log2", "erf": "erf", "floor": "floor", "ceil": "ceil", "abs": "abs", "sin": "sin", "cos": "cos",
    "fast_expf": "exp", "fast_logf": "log", "fast_log2f": "log2", "fast_sinf": "sin", "fast_cosf": "cos",
}
TL_BINARY_TWINS = {"div_rn": "div_rn", "fast_dividef": "fdiv", "add_rn": "add", "mul_rn": "mul", "sub_rn": "sub"}
# libdevice name -> (input kind, torch reference computed in float64)
TORCH_TWINS: dict[str, tuple[str, Callable[[torch.Tensor], torch.Tensor]]] = {
    "tanh": ("signed", torch.tanh), "erfc": ("signed", torch.special.erfc), "expm1": ("signed", torch.expm1),
    "log1p": ("plain", torch.log1p), "log10": ("plain", torch.log10), "exp10": ("signed", lambda x: 10.0 ** x),
    "trunc": ("signed", torch.trunc), "rint": ("signed", torch.round), "nearbyint": ("signed", torch.round),
    "round": ("signed", lambda x: torch.sign(x) * torch.floor(x.abs() + 0.5)), "atan": ("signed", torch.atan),
    "sinh": ("signed", torch.sinh), "cosh": ("signed", torch.cosh), "asinh": ("signed", torch.asinh),
    "cbrt": ("plain", lambda x: x ** (1.0 / 3.0)), "lgamma": ("plain", torch.lgamma),
    "normcdf": ("signed", lambda x: 0.5 * torch.special.erfc(-x / 2.0 ** 0.5)),
    "isnan": ("special", lambda x: torch.isnan(x).double()), "isinf": ("special", lambda x: torch.isinf(x).double()),
    "finitef": ("special", lambda x: torch.isfinite(x).double()),
    "signbit": ("special", lambda x: torch.signbit(x).double()),
    "llrint": ("signed", torch.round), "float2int_rz": ("signed", torch.trunc),
    "float2int_rd": ("signed", torch.floor), "float2int_ru": ("signed", torch.ceil),
}
TORCH_BINARY_TWINS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "pow": torch.pow, "atan2": torch.atan2, "fmod": torch.fmod, "hypot": torch.hypot,
    "copysign": torch.copysign, "div_rz": torch.div, "fast_powf": torch.pow,
}


def check(name: str, actual: torch.Tensor, expected: torch.Tensor, tol: tuple[float, float]) -> None:
    result = compare(name, actual, expected.to(torch.float64), *tol)
    assert result.ok, result.summary()


@pytest.mark.parametrize("name", sorted(TL_TWINS))
def test_unary_libdevice_matches_the_tl_function(shims, name: str) -> None:
    x = inputs("plain")
    got, want = torch.zeros(N), torch.zeros(N)
    launch(unary_libdevice, x, got, N, NAME=name, BLOCK_N=BLOCK)
    launch(unary_tl, x, want, N, NAME=TL_TWINS[name], BLOCK_N=BLOCK)
    check(name, got, want, TOL_VS_TL)


@pytest.mark.parametrize("name", sorted(TL_BINARY_TWINS))
def test_binary_libdevice_matches_the_tl_function(shims, name: str) -> None:
    x, z = inputs("signed"), inputs("plain").flip(0)
    got, want = torch.zeros(N), torch.zeros(N)
    launch(binary_libdevice, x, z, got, N, NAME=name, BLOCK_N=BLOCK)
    launch(binary_tl, x, z, want, N, NAME=TL_BINARY_TWINS[name], BLOCK_N=BLOCK)
    check(name, got, want, TOL_VS_TL)


def test_fma_matches_tl_fma(shims) -> None:
    x, y = inputs("signed"), inputs("plain")
    got, want = torch.zeros(N), torch.zeros(N)
    launch(fma_both, x, y, got, want, N, BLOCK_N=BLOCK)
    check("fma", got, want, TOL_VS_TL)


@pytest.mark.parametrize("name", sorted(TORCH_TWINS))
def test_unary_libdevice_matches_torch(shims, name: str) -> None:
    kind, reference = TORCH_TWINS[name]
    x = inputs(kind)
    got = torch.zeros(N)
    launch(unary_libdevice, x, got, N, NAME=name, BLOCK_N=BLOCK)
    check(name, got, reference(x.to(torch.float64)), TOL_VS_TORCH)


@pytest.mark.parametrize("name", sorted(TORCH_BINARY_TWINS))
def test_binary_libdevice_matches_torch(shims, name: str) -> None:
    x, z = inputs("plain"), inputs("plain").flip(0)
    got = torch.zeros(N)
    launch(binary_libdevice, x, z, got, N, NAME=name, BLOCK_N=BLOCK)
    check(name, got, TORCH_BINARY_TWINS[name](x.to(torch.float64), z.to(torch.float64)), TOL_VS_TORCH)


def test_directed_rounding_brackets_the_exact_quotient(shims) -> None:
    x, z = inputs("plain"), torch.full((N,), 3.0)
    down, up, zero = torch.zeros(N), torch.zeros(N), torch.zeros(N)
    for name, out in (("div_rd", down), ("div_ru", up), ("div_rz", zero)):
        launch(binary_libdevice, x, z, out, N, NAME=name, BLOCK_N=BLOCK)
    exact = x.to(torch.float64) / 3.0
    assert bool((down.double() <= exact).all()) and bool((up.double() >= exact).all())
    assert bool(((up - down) <= torch.finfo(torch.float32).eps * up.abs()).all())
    assert torch.equal(zero, down)  # positive quotients: toward zero is down


def test_every_spelling_of_libdevice_works(shims) -> None:
    x = inputs("plain")
    got = torch.zeros(N)
    launch(every_libdevice_path, x, got, N, BLOCK_N=BLOCK)
    check("rsqrt x3", got, 3.0 / torch.sqrt(x.double()), TOL_VS_TORCH)


def test_from_imports_made_after_install_get_the_shim(shims) -> None:
    from triton.language.extra.cuda.libdevice import rsqrt as cuda_rsqrt
    from triton.language.extra.libdevice import rsqrt

    assert rsqrt is cuda_rsqrt and not tl.core.is_builtin(rsqrt)  # the stub is the CUDA function, callable here


def test_libdevice_without_a_cpu_version_is_an_interpreter_limit(shims) -> None:
    with pytest.raises(InterpreterError) as raised:
        launch(no_cpu_version, inputs("plain"), torch.zeros(N), N, BLOCK_N=BLOCK)
    assert isinstance(raised.value.__cause__, InterpreterUnsupported)
    assert "libdevice.erfinv" in str(raised.value.__cause__)
    assert is_interpreter_limit(raised.value)


def test_symbols_map_back_to_libdevice_names() -> None:
    symbols = interpreter_compat.libdevice_symbols()
    assert symbols["__nv_rsqrtf"] == symbols["__nv_rsqrt"] == "rsqrt"
    assert symbols["__nv_fast_fdividef"] == "fast_dividef" and symbols["__nv_isnanf"] == "isnan"
    # what Liger-Kernel, FlagGems, unsloth and kernl call (searched in their sources) has a CPU version
    used = {"rsqrt", "tanh", "erf", "exp", "exp2", "pow", "div_rn", "div_rz", "isnan", "isinf", "finitef",
            "isfinited", "trunc", "fmod", "atan2", "atan", "rint", "llrint", "log2", "sqrt", "fast_expf",
            "fast_dividef", "fma", "log", "round", "floor"}
    assert used <= set(LIBDEVICE)
    assert set(LIBDEVICE) <= set(symbols.values())  # no entry for a function libdevice does not have


# ------------------------------------------------------------------------------------ the other shims


def test_float_argument_is_an_fp32_scalar(shims) -> None:
    x = inputs("plain")
    got = torch.zeros(N)
    launch(float_argument, x, got, N, 0.1, BLOCK_N=BLOCK)
    eps32 = torch.tensor(0.1, dtype=torch.float32)
    assert torch.equal(got, x + eps32 + eps32)  # fp32 arithmetic, as on the GPU


def test_module_level_aliases_of_tl_builtins(shims) -> None:
    x = inputs("signed")
    got, want = torch.zeros(N), torch.zeros(N)
    launch(aliases, x, got, want, N, BLOCK_N=BLOCK)
    check("erf alias", got, want, (0.0, 0.0))
    # the kernel's globals are restored after the run, with the interpreter's own tl.* patches
    assert erf_alias is tl.math.erf and tl.core.is_builtin(erf_alias)


def test_block_and_scalar_mask(shims) -> None:
    rows = 3
    x = torch.arange(rows * N, dtype=torch.float32)
    got = torch.full((rows * N,), -1.0)
    launch(mixed_mask, x, got, N, rows - 1, grid=(rows,), BLOCK_N=BLOCK)
    assert torch.equal(got[: (rows - 1) * N], 2.0 * x[: (rows - 1) * N])
    assert bool((got[(rows - 1) * N:] == -1.0).all())  # the masked-off row is untouched


def test_string_annotated_constexpr(shims) -> None:
    x = inputs("plain")
    got = torch.zeros(N)
    launch(string_annotation, x, got, N, BLOCK_N=BLOCK)
    assert torch.equal(got, x + 1.0)


def test_install_is_undone() -> None:
    from triton.runtime import interpreter

    before = (libdevice.rsqrt, interpreter._implicit_cvt, interpreter._patch_lang, interpreter.GridExecutor.__init__,
              interpreter.InterpreterBuilder.create_splat, interpreter.InterpreterBuilder.create_extern_elementwise)
    with interpreter_compat.installed():
        assert libdevice.rsqrt is not before[0] and interpreter._implicit_cvt is not before[1]
    after = (libdevice.rsqrt, interpreter._implicit_cvt, interpreter._patch_lang, interpreter.GridExecutor.__init__,
             interpreter.InterpreterBuilder.create_splat, interpreter.InterpreterBuilder.create_extern_elementwise)
    assert after == before


# ------------------------------------------------------------------------------------ limits vs bugs


def interpreter_error(cause: BaseException) -> InterpreterError:
    try:
        raise InterpreterError(repr(cause)) from cause
    except InterpreterError as exc:
        return exc


def test_inline_asm_is_an_interpreter_limit(shims) -> None:
    with pytest.raises(InterpreterError) as raised:
        launch(inline_asm, inputs("plain"), torch.zeros(N), N, BLOCK_N=BLOCK)
    assert is_interpreter_limit(raised.value)


def test_a_bug_in_the_kernel_is_not_an_interpreter_limit(shims) -> None:
    with pytest.raises(InterpreterError) as raised:
        launch(not_a_power_of_two, inputs("plain"), torch.zeros(N), N, BLOCK_N=N)
    assert not is_interpreter_limit(raised.value)


@pytest.mark.parametrize(("cause", "limit"), [
    (NotImplementedError("inline_asm not supported in interpreter mode"), True),
    (ValueError("Did you forget to add @triton.jit ? (`_semantic` argument must be provided outside of JIT "
                "functions.)"), True),
    (ValueError("arange's range must be a power of 2"), False),
    (AssertionError("BLOCK_K must be >= 16"), False),
    (AttributeError("'NoneType' object has no attribute 'dtype'"), False),
    (NameError("name 'acc' is not defined"), False),
])
def test_interpreter_limit_by_cause(cause: BaseException, limit: bool) -> None:
    assert is_interpreter_limit(interpreter_error(cause)) is limit
    assert not is_interpreter_limit(cause)  # it did not come out of the interpreter's kernel run


def test_classify_error_names_the_limit() -> None:
    chain = ("triton.runtime.errors.InterpreterError", "builtins.NotImplementedError")
    assert classify_error(WorkerError(type="InterpreterError", chain=chain, interpreter_limit=True)) \
        == "interpreter-unsupported"
    assert classify_error(WorkerError(type="InterpreterError", chain=chain, interpreter_limit=False)) == "runtime-error"
    assert classify_error(WorkerError(type="InterpreterError", chain=chain)) == "runtime-error"
    assert classify_error(WorkerError(type="CompilationError", interpreter_limit=True)) == "compile-error"


def test_refute_interpreter_limits() -> None:
    traps = [("interpreter-unsupported",), ("interpreter-unsupported",), ("interpreter-unsupported",), ("oob-read",)]
    problems = ["layernorm", "linear", "stats", "linear"]
    compiles = {"layernorm": True, "linear": False}  # stats: no compile check ran
    assert refute_interpreter_limits(traps, problems, compiles) == [
        ("interpreter-unsupported",), ("runtime-error",), ("interpreter-unsupported",), ("oob-read",)]


def case(case_id: str, target: str, traps: tuple[str, ...] = (), passed: bool = False) -> CaseResult:
    return CaseResult(case_id=case_id, target=target, title=case_id, visibility="public", max_score=2.0,
                      score=2.0 if passed else 0.0, passed=passed, message="raised X", traps=traps)


def test_weigh_interpreter_limits_against_the_compile_check() -> None:
    spec = load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")
    cases = [case("ln", "layernorm", ("interpreter-unsupported",)),
             case("ln-kernel", "layernorm_forward_kernel", ("interpreter-unsupported",)),
             case("linear", "fused_linear_gelu", ("interpreter-unsupported",)),
             case("stats", "row_mean_var", passed=True)]
    aot = [case("gpu-compile-layernorm_forward_kernel", "layernorm_forward_kernel", passed=True),
           case("gpu-compile-fused_linear_gelu_kernel", "fused_linear_gelu_kernel", ("gpu-incompatible",))]
    weighed, notes = weigh_interpreter_limits(cases, aot, spec)
    assert [c.traps for c in weighed] == [("interpreter-unsupported",), ("interpreter-unsupported",),
                                          ("runtime-error",), ()]
    assert weighed[0].message.startswith("Triton's CPU interpreter cannot run this, but the kernel compiles")
    assert "does not compile for the grading GPU either" in weighed[2].message
    assert weighed[3] == cases[3]
    assert len(notes) == 1 and "2 case(s), 4 point(s)" in notes[0] and "--backend cuda" in notes[0]
    assert weigh_interpreter_limits(cases[3:], aot, spec) == (cases[3:], [])


# ------------------------------------------------------------------------------------ end to end


def grade(source: Path, tmp_path: Path) -> dict[str, Any]:
    """`grader grade` on a copy of `source` as fused_layers.py, seed 1, on the interpreter; results.json."""
    submission = tmp_path / "fused_layers.py"
    shutil.copyfile(source, submission)
    out = tmp_path / "out"
    argv = ["--assignments", str(ROOT / "assignments"), "grade", str(submission), "--assignment", "fused_layers",
            "--out", str(out), "--seed", "1", "--backend", "interpreter"]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(argv) == 0
    return json.loads((out / "results.json").read_text(encoding="utf-8"))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["liger_layer_norm", "liger_rms_norm_style", "tutorial_matmul_gelu_alias",
                                  "tutorial_block_pointer_matmul"])
def test_public_kernel_gets_full_marks_on_the_cpu(name: str, tmp_path: Path) -> None:
    """tutorial_block_pointer_matmul (tl.make_block_ptr, tl.advance) needs the pinned Triton 3.6: 3.9 has no block
    pointers, neither its interpreter nor its compiler (9 of 40 there: runtime-error, gpu-incompatible)."""
    results = grade(PUBLIC_KERNELS / f"{name}.py", tmp_path)
    failed = [(t["name"], t["tags"], t["output"][:300]) for t in results["tests"] if t["status"] != "passed"]
    assert failed == []
    assert results["score"] == results["extra_data"]["max_score"] == 40
    assert all_traps(results) == []
    compiled = [t for t in results["tests"] if t["extra_data"]["case_id"].startswith("gpu-compile-")]
    assert len(compiled) == 3  # and each passed: the kernels are GPU-correct as well


@pytest.mark.slow
def test_inline_asm_is_interpreter_unsupported_not_a_runtime_error(tmp_path: Path) -> None:
    source = (ROOT / "reference" / "fused_layers" / "reference.py").read_text(encoding="utf-8")
    anchor = "    inv_std = 1.0 / tl.sqrt(var + eps)\n"
    asm = ('    inv_std = tl.inline_asm_elementwise("rsqrt.approx.f32 $0, $1;", "=r,r", [var + eps],\n'
           '                                        dtype=tl.float32, is_pure=True, pack=1)\n')
    assert source.count(anchor) == 1
    planted = tmp_path / "planted.py"
    planted.write_text(source.replace(anchor, asm), encoding="utf-8")
    results = grade(planted, tmp_path)
    spec = load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")
    ln_targets = {"layernorm", "layernorm_forward_kernel"}
    for test in results["tests"]:
        if test["extra_data"]["target"] in ln_targets and not test["extra_data"]["case_id"].startswith("gpu-"):
            assert test["tags"] == ["interpreter-unsupported"], (test["name"], test["tags"], test["output"])
            assert test["score"] == 0
            assert "compiles for the grading GPU" in test["output"] and "inline_asm" in test["output"]
        else:
            assert test["status"] == "passed", (test["name"], test["output"])
    ln_points = sum(c.points for c in spec.cases if c.target in ln_targets)
    assert results["score"] == spec.max_score - ln_points
    assert all_traps(results) == ["interpreter-unsupported"]
    assert any("--backend cuda" in note for note in results["extra_data"]["notes"])


def test_a_scalar_held_as_a_one_element_array_is_an_index() -> None:
    """Triton 3.6's interpreter reads a scalar argument as `int(handle.data)`, which NumPy >= 2.4 refuses for the
    one-element 1-d array it holds (a loop `range(0, N, BLOCK_N)` failed on the H200 image: triton 3.6, numpy
    2.5): the shim reads it squeezed, for 0-d and 1-d alike, and still refuses a block."""
    import numpy as np

    from grader.running.worker.interpreter_compat import _scalar_index

    class Handle:
        def __init__(self, data: Any) -> None:
            self.data = data

    class Scope:
        def set_attr(self, owner: Any, name: str, value: Any) -> None:
            setattr(owner, name, value)

    class Tensor:
        def __init__(self, data: Any) -> None:
            self.handle = Handle(data)

    _scalar_index(lambda tensor, scope: None)(Tensor, Scope())
    assert range(0, Tensor(np.array([10], dtype=np.int32)), 4) == range(0, 10, 4)
    assert [0, 1, 2][Tensor(np.array(2, dtype=np.int64))] == 2
    with pytest.raises(TypeError):
        [0, 1, 2][Tensor(np.array([1, 2], dtype=np.int32))]
