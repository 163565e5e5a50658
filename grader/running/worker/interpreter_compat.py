"""Let Triton's CPU interpreter run GPU-correct code that real kernels contain.

Under TRITON_INTERPRET=1 some code that compiles for the grading GPU (sm_90) and is right there fails
on the CPU with a misleading message. Measured on public kernels (Liger-Kernel, FlagGems, unsloth):

* libdevice math (`from triton.language.extra import libdevice`, `...extra.cuda.libdevice`,
  `tl.extra.cuda.libdevice.rsqrt`, `from triton.language.extra.libdevice import rsqrt`): the
  dispatch stubs return None ("'NoneType' object has no attribute 'dtype'"), the CUDA functions
  want the compiler's `_semantic`, and the interpreter has no `extern_elementwise`. Here the stubs
  and the CUDA functions run through Triton's own type dispatch, and every libdevice symbol in
  `LIBDEVICE` is computed with numpy (in float64, rounded once to the result type).
* float scalar arguments stay Python floats in the interpreter (`eps.to(tl.float32)`: "'float'
  object has no attribute 'to'"; `eps.dtype` likewise); on the GPU they are fp32 scalars. Here they
  become fp32 scalars too.
* module-level aliases of Triton builtins (`erf = tl.math.erf`, `from triton.language.math import
  rsqrt`, `triton_cast = tl.cast`): the interpreter re-binds `tl.*` only, so the alias is called
  without `_semantic` ("Did you forget to add @triton.jit ?"). Here a kernel's global builtins are
  re-bound with the `tl.*` ones, and restored with them.
* a mask mixing a block and a scalar (`(cols < N) & (row < M)`): the splat of the scalar comparison
  comes out int32, and the load rejects it ("mask has unsupported dtype"). Here it stays boolean.
* a constexpr annotated with a string (`BLOCK: 'tl.constexpr'`, TorchInductor's style) is a runtime
  scalar in the interpreter ("arange's arguments must be of type tl.constexpr"). Here it is a constexpr.

Module-level constexprs (`LOG2E = tl.constexpr(1.44)`, Liger's `_CASTING_MODE: tl.constexpr =
tl.constexpr(0)`) already work. What still cannot run raises NotImplementedError
(`InterpreterUnsupported` for libdevice functions without a CPU version); `is_interpreter_limit`
tells such an exception from a bug in the code, for the grader to name it `interpreter-unsupported`.

`install()` applies the shims to this process (the worker calls it once, in interpreter mode, before
it imports the submission) and returns a function that undoes them. Given a `HintLog`, it also checks
every `tl.multiple_of` / `tl.max_contiguous` / `tl.max_constancy` promise against the values the
interpreter computed (grader/running/worker/hint_check.py): the interpreter ignores them, a GPU
believes them.
"""

from __future__ import annotations

import ast
import functools
import inspect
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from grader.running.worker.hint_check import HintLog, checking_set_attr

SEMANTIC_MESSAGE = "`_semantic` argument must be provided"


class InterpreterUnsupported(NotImplementedError):
    """Code the GPU compiler accepts that Triton's CPU interpreter (with these shims) cannot run."""


# --------------------------------------------------------------------------- libdevice in numpy
#
# Each entry computes one libdevice function on numpy arrays already broadcast to one shape (Triton's
# extern_elementwise did the type dispatch and broadcasting, as on the GPU). It gets the result's numpy
# dtype first; a float result is rounded to it once, after the float64 computation.

Impl = Callable[..., Any]


def _real(fn: Callable[..., Any]) -> Impl:
    """A float function computed in float64."""
    return lambda out, *xs: fn(*(np.asarray(x, dtype=np.float64) for x in xs))


def _vectorized(fn: Callable[..., float], at_error: float = math.nan) -> Impl:
    """A float function of Python's math module, element by element; `at_error` where math raises
    (poles, overflow, domain errors) instead of returning inf or NaN."""

    def safe(*xs: float) -> float:
        try:
            return fn(*xs)
        except (ValueError, OverflowError):
            return at_error

    return _real(np.vectorize(safe, otypes=[np.float64]))


def _round_half_away(x: np.ndarray) -> np.ndarray:
    return np.copysign(np.floor(np.abs(x) + 0.5), x)


def _directed(fn: Callable[..., Any], mode: str) -> Impl:
    """fn in float64, then rounded to the result type to nearest (rn), toward zero (rz), down (rd) or
    up (ru). Exact for float32 add, sub and mul (float64 holds their results), within an ulp of the
    float64 result otherwise; a float64 result is rounded to nearest whatever the mode."""

    def impl(out: np.dtype, *xs: np.ndarray) -> np.ndarray:
        exact = fn(*(np.asarray(x, dtype=np.float64) for x in xs))
        rounded = exact.astype(out)
        if mode == "rn" or out == np.float64:
            return rounded
        back = rounded.astype(np.float64)
        toward = {"rd": -np.inf, "ru": np.inf, "rz": np.where(exact > 0, -np.inf, np.inf)}[mode]
        overshoot = {"rd": back > exact, "ru": back < exact, "rz": np.abs(back) > np.abs(exact)}[mode]
        return np.where(overshoot, np.nextafter(rounded, np.asarray(toward, dtype=out)), rounded)

    return impl


def _to_integer(rounding: Callable[[np.ndarray], np.ndarray]) -> Impl:
    return lambda out, x: rounding(np.asarray(x, dtype=np.float64))


def _bits(out: np.dtype, x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(out)


def _count_leading_zeros(out: np.dtype, x: np.ndarray) -> np.ndarray:
    width = x.dtype.itemsize * 8
    unsigned = np.ascontiguousarray(x).view(f"u{x.dtype.itemsize}").astype(object)
    return np.vectorize(lambda v: width - int(v).bit_length(), otypes=[np.int64])(unsigned)


def _popcount(out: np.dtype, x: np.ndarray) -> np.ndarray:
    unsigned = np.ascontiguousarray(x).view(f"u{x.dtype.itemsize}").astype(object)
    return np.vectorize(lambda v: bin(int(v)).count("1"), otypes=[np.int64])(unsigned)


def _mulhi(out: np.dtype, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    width = x.dtype.itemsize * 8
    product = np.vectorize(lambda a, b: (int(a) * int(b)) >> width, otypes=[object])(x, y)
    mask = (1 << width) - 1
    return np.vectorize(lambda v: v & mask, otypes=[np.uint64])(product).astype(f"u{x.dtype.itemsize}").view(out)


def _fma(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    # x * y is exact in float64 for float32 operands; the sum rounds there, then once more to float32
    return x * y + z


_ROUNDING = {"rn": np.rint, "rz": np.trunc, "rd": np.floor, "ru": np.ceil}
_SQRT_HALF = 0.7071067811865476

LIBDEVICE: dict[str, Impl] = {
    # one argument
    "abs": lambda out, x: np.abs(x),
    "acos": _real(np.arccos), "acosh": _real(np.arccosh), "asin": _real(np.arcsin),
    "asinh": _real(np.arcsinh), "atan": _real(np.arctan), "atanh": _real(np.arctanh),
    "cbrt": _real(np.cbrt), "rcbrt": _real(lambda x: 1.0 / np.cbrt(x)),
    "ceil": _real(np.ceil), "floor": _real(np.floor), "trunc": _real(np.trunc),
    "rint": _real(np.rint), "nearbyint": _real(np.rint), "round": _real(_round_half_away),
    "cos": _real(np.cos), "sin": _real(np.sin), "tan": _real(np.tan),
    "cospi": _real(lambda x: np.cos(np.pi * x)), "sinpi": _real(lambda x: np.sin(np.pi * x)),
    "cosh": _real(np.cosh), "sinh": _real(np.sinh), "tanh": _real(np.tanh),
    "erf": _vectorized(math.erf), "erfc": _vectorized(math.erfc),
    "erfcx": _vectorized(lambda x: math.exp(x * x) * math.erfc(x) if x < 25 else 1 / (x * math.sqrt(math.pi)),
                         math.inf),
    "normcdf": _vectorized(lambda x: 0.5 * math.erfc(-x * _SQRT_HALF)),
    "lgamma": _vectorized(math.lgamma, math.inf), "tgamma": _vectorized(math.gamma, math.nan),
    "exp": _real(np.exp), "exp2": _real(np.exp2), "exp10": _real(lambda x: np.power(10.0, x)),
    "expm1": _real(np.expm1), "log": _real(np.log), "log2": _real(np.log2), "log10": _real(np.log10),
    "log1p": _real(np.log1p), "logb": _real(lambda x: np.floor(np.log2(np.abs(x)))),
    "ilogb": lambda out, x: np.frexp(np.asarray(x, dtype=np.float64))[1] - 1,
    "sqrt": _real(np.sqrt), "rsqrt": _real(lambda x: 1.0 / np.sqrt(x)),
    "rsqrt_rn": _real(lambda x: 1.0 / np.sqrt(x)),
    "saturatef": _real(lambda x: np.clip(x, 0.0, 1.0)),
    "cyl_bessel_i0": _real(np.i0),
    "fast_expf": _real(np.exp), "fast_exp10f": _real(lambda x: np.power(10.0, x)),
    "fast_logf": _real(np.log), "fast_log2f": _real(np.log2), "fast_log10f": _real(np.log10),
    "fast_sinf": _real(np.sin), "fast_cosf": _real(np.cos), "fast_tanf": _real(np.tan),
    "isnan": lambda out, x: np.isnan(x), "isinf": lambda out, x: np.isinf(x),
    "finitef": lambda out, x: np.isfinite(x), "isfinited": lambda out, x: np.isfinite(x),
    "signbit": lambda out, x: np.signbit(x),
    "llrint": _to_integer(np.rint), "llround": _to_integer(_round_half_away),
    "float_as_int": _bits, "float_as_uint": _bits, "int_as_float": _bits, "uint_as_float": _bits,
    "double_as_longlong": _bits, "longlong_as_double": _bits,
    "clz": _count_leading_zeros, "popc": _popcount,
    # two arguments
    "atan2": _real(np.arctan2), "copysign": _real(np.copysign), "fmod": _real(np.fmod),
    "hypot": _real(np.hypot), "rhypot": _real(lambda x, y: 1.0 / np.hypot(x, y)),
    "fdim": _real(lambda x, y: np.where(x > y, x - y, 0.0)),
    "remainder": _vectorized(math.remainder),
    "pow": _real(np.power), "fast_powf": _real(np.power),
    "fast_dividef": _real(np.divide),
    "ldexp": lambda out, x, n: np.ldexp(np.asarray(x, dtype=np.float64), np.asarray(n, dtype=np.int64)),
    "scalbn": lambda out, x, n: np.ldexp(np.asarray(x, dtype=np.float64), np.asarray(n, dtype=np.int64)),
    "nextafter": lambda out, x, y: np.nextafter(np.asarray(x, dtype=out), np.asarray(y, dtype=out)),
    "mulhi": _mulhi,
    "mul24": lambda out, x, y: (x.astype(np.int64) & 0xFFFFFF) * (y.astype(np.int64) & 0xFFFFFF),
    "hadd": lambda out, x, y: (x.astype(np.int64) + y.astype(np.int64)) >> 1,
    "rhadd": lambda out, x, y: (x.astype(np.int64) + y.astype(np.int64) + 1) >> 1,
    # three and four arguments
    "fma": _directed(_fma, "rn"),
    "sad": lambda out, x, y, z: np.abs(x.astype(np.int64) - y.astype(np.int64)) + z,
    "norm3d": _real(lambda x, y, z: np.sqrt(x * x + y * y + z * z)),
    "rnorm3d": _real(lambda x, y, z: 1.0 / np.sqrt(x * x + y * y + z * z)),
    "norm4d": _real(lambda x, y, z, t: np.sqrt(x * x + y * y + z * z + t * t)),
    "rnorm4d": _real(lambda x, y, z, t: 1.0 / np.sqrt(x * x + y * y + z * z + t * t)),
}


def _rounding_variants() -> dict[str, Impl]:
    """The families with a rounding mode in the name: add_rn, div_rz, float2int_rd, ll2float_ru, ..."""
    table: dict[str, Impl] = {}
    for mode, rounding in _ROUNDING.items():
        table[f"add_{mode}"] = _directed(np.add, mode)
        table[f"sub_{mode}"] = _directed(np.subtract, mode)
        table[f"mul_{mode}"] = _directed(np.multiply, mode)
        table[f"div_{mode}"] = _directed(np.divide, mode)
        table[f"rcp_{mode}"] = _directed(np.reciprocal, mode)
        table[f"sqrt_{mode}"] = _directed(np.sqrt, mode)
        table[f"fma_{mode}"] = _directed(_fma, mode)
        table[f"double2float_{mode}"] = _directed(np.positive, mode)
        for kind in ("int", "uint", "ll", "ull"):
            table[f"{kind}2float_{mode}"] = _directed(np.positive, mode)
            table[f"float2{kind}_{mode}"] = _to_integer(rounding)
            table[f"double2{kind}_{mode}"] = _to_integer(rounding)
        for kind in ("ll", "ull") if mode != "rn" else ("int", "uint", "ll", "ull"):  # 32-bit ints are exact
            table[f"{kind}2double_{mode}"] = _directed(np.positive, mode)
    return table


LIBDEVICE.update(_rounding_variants())


def _cuda_libdevice() -> Any:
    from triton.language.extra.cuda import libdevice

    return libdevice


@functools.lru_cache(maxsize=1)
def libdevice_symbols() -> Mapping[str, str]:
    """The CUDA libdevice symbol each function dispatches to, mapped back to the function's name
    (`__nv_rsqrtf` -> `rsqrt`), read from the source of Triton's CUDA libdevice module."""
    tree = ast.parse(inspect.getsource(_cuda_libdevice()))
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Constant) and isinstance(inner.value, str) and inner.value.startswith("__nv_"):
                    names.setdefault(inner.value, node.name)
    return names


def compute_libdevice(name: str, out: np.dtype, args: list[np.ndarray]) -> np.ndarray:
    """libdevice function `name` on numpy arrays, as an array of dtype `out`."""
    impl = LIBDEVICE.get(name)
    if impl is None:
        raise InterpreterUnsupported(f"libdevice.{name} has no CPU implementation in Triton's interpreter "
                                     "(the GPU compiler accepts it)")
    with np.errstate(all="ignore"):
        result = np.asarray(impl(out, *args))
        return result if result.dtype == out else result.astype(out)


# --------------------------------------------------------------------------- the shims


class _Patches:
    """Attribute replacements on modules and classes, undone in reverse order."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any]] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        self._undo.append((owner, name, vars(owner).get(name, _MISSING)))
        setattr(owner, name, value)

    def undo(self) -> None:
        while self._undo:
            owner, name, value = self._undo.pop()
            if value is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


_MISSING = object()


class _Globals:
    """A function's globals as attributes, so that the interpreter's patch scope can set and restore them."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        object.__setattr__(self, "_namespace", namespace)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._namespace[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self._namespace[name] = value

    def __delattr__(self, name: str) -> None:
        del self._namespace[name]


def _interpreted(builtin: Callable[..., Any]) -> Callable[..., Any]:
    """A Triton builtin called with the interpreter's semantic, as the interpreter does for `tl.*`."""
    from triton.runtime import interpreter

    @functools.wraps(builtin)
    def call(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("_semantic", None)
        return builtin(*args, _semantic=interpreter.interpreter_semantic, **kwargs)

    call.__dict__.pop("__triton_builtin__", None)  # copied by wraps; this one is called without a semantic
    return call


def _unsupported_stub(name: str) -> Callable[..., Any]:
    def stub(*args: Any, **kwargs: Any) -> Any:
        raise InterpreterUnsupported(f"libdevice.{name} has no CUDA implementation Triton's interpreter could use")

    stub.__name__ = name
    return stub


def _patch_libdevice(patches: _Patches) -> None:
    """CUDA libdevice functions run through Triton's dispatch with the interpreter's semantic; the
    backend-neutral stubs (`triton.language.extra.libdevice`) become those functions, as the CUDA
    backend makes them when it compiles."""
    import triton.language as tl
    from triton.language.extra import libdevice as stubs

    cuda = _cuda_libdevice()
    wrapped = {}
    for name, member in list(vars(cuda).items()):
        if inspect.isfunction(member) and tl.core.is_builtin(member):
            wrapped[name] = _interpreted(member)
            patches.set(cuda, name, wrapped[name])
    for name, member in list(vars(stubs).items()):
        if inspect.isfunction(member) and member.__module__ == stubs.__name__:
            patches.set(stubs, name, wrapped.get(name) or _unsupported_stub(name))


def _extern_elementwise(self: Any, lib_name: str, lib_path: str, symbol: str, args: list[Any], ret_type: Any,
                        is_pure: bool) -> Any:
    from triton.runtime import interpreter

    name = libdevice_symbols().get(symbol)
    if name is None:
        raise InterpreterUnsupported(f"extern function {symbol} ({lib_name or 'libdevice'}) in Triton's interpreter")
    scalar = ret_type.scalar
    out = interpreter._get_np_dtype(scalar)
    return interpreter.TensorHandle(compute_libdevice(name, out, [a.data for a in args]), scalar)


def _float_arguments(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Python float kernel arguments become fp32 scalars, as the GPU launcher passes them."""
    import triton.language as tl
    from triton.runtime import interpreter

    @functools.wraps(original)
    def convert(arg: Any) -> Any:
        if isinstance(arg, float):
            with np.errstate(over="ignore"):
                data = np.array([arg], dtype=np.float32)
            return tl.tensor(interpreter.TensorHandle(data, tl.float32), tl.float32)
        return original(arg)

    return convert


def _global_builtins(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The interpreter re-binds `tl.*` for a kernel's run; re-bind the kernel's global aliases of Triton
    builtins too (`erf = tl.math.erf`), in the same scope so that they are restored with it."""
    import triton.language as tl

    @functools.wraps(original)
    def patch_lang(fn: Any) -> Any:
        scope = original(fn)
        namespace = _Globals(fn.__globals__)
        for name, value in list(fn.__globals__.items()):
            if inspect.isfunction(value) and tl.core.is_builtin(value):
                scope.set_attr(namespace, name, _interpreted(value))
        return scope

    return patch_lang


def _boolean_splat(original: Callable[..., Any]) -> Callable[..., Any]:
    """A scalar comparison splat to a block keeps int1 data boolean (the interpreter gives the compare's
    handle its operands' dtype, and the splat used it)."""
    import triton.language as tl
    from triton.runtime import interpreter

    @functools.wraps(original)
    def create_splat(self: Any, ret_ty: Any, arg: Any) -> Any:
        handle = original(self, ret_ty, arg)
        if ret_ty.scalar == tl.int1 and handle.data.dtype != np.bool_:
            return interpreter.TensorHandle(handle.data.astype(np.bool_), tl.int1)
        return handle

    return create_splat


def _quoted_constexprs(original: Callable[..., None]) -> Callable[..., None]:
    """A parameter annotated with a string, `BLOCK: 'tl.constexpr'` (as TorchInductor writes kernels), is a
    constexpr for the GPU compiler; the interpreter re-compiles the kernel's source with postponed
    annotations, the string comes back quoted twice and the parameter became a runtime scalar. Decide
    from the kernel as written, the way the GPU compiler's KernelParam.is_constexpr does."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import _normalize_ty

    @functools.wraps(original)
    def init(self: Any, fn: Any, arg_names: list[str], *args: Any, **kwargs: Any) -> None:
        original(self, fn, arg_names, *args, **kwargs)
        written = next((f for f, rewritten in InterpretedFunction.rewritten_fn.items() if rewritten is fn), fn)
        for name, param in inspect.signature(written).parameters.items():
            if name not in self.constexprs and param.annotation is not param.empty \
                    and "constexpr" in _normalize_ty(param.annotation):
                self.constexprs.append(name)

    return init


def _scalar_index(original: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """A scalar's handle holds a one-element array, 0-d or 1-d: read it squeezed, as Triton >= 3.7 does. Triton
    3.6's `int(self.handle.data)` raises TypeError under NumPy >= 2.4 for the 1-d one, so `range(0, N, BLOCK_N)`
    over a kernel argument failed in every kernel that loops (seen on the H200 image: triton 3.6, numpy 2.5)."""

    @functools.wraps(original)
    def patch_lang_tensor(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).squeeze()))

    return patch_lang_tensor


def install(hint_log: HintLog | None = None) -> Callable[[], None]:
    """Apply every shim to this process's Triton interpreter; return the function that undoes them.
    A shim whose target this Triton does not have is skipped (the code it serves stays unsupported).
    With `hint_log`, false hints are recorded there (the first counterexample since its last reset)."""
    from triton.runtime import interpreter

    patches = _Patches()
    if hint_log is not None and hasattr(interpreter.TensorHandle, "set_attr"):
        handle = interpreter.TensorHandle
        patches.set(handle, "set_attr", checking_set_attr(handle.set_attr, hint_log))
    builder = interpreter.InterpreterBuilder
    if hasattr(interpreter, "interpreter_semantic"):  # builtins take a `_semantic` (Triton >= 3.4)
        _patch_libdevice(patches)
        patches.set(builder, "create_extern_elementwise", _extern_elementwise)
        if hasattr(interpreter, "_patch_lang"):
            patches.set(interpreter, "_patch_lang", _global_builtins(interpreter._patch_lang))
    if hasattr(interpreter, "_patch_lang_tensor"):
        patches.set(interpreter, "_patch_lang_tensor", _scalar_index(interpreter._patch_lang_tensor))
    if hasattr(interpreter, "_implicit_cvt"):
        patches.set(interpreter, "_implicit_cvt", _float_arguments(interpreter._implicit_cvt))
    if hasattr(interpreter, "GridExecutor"):
        patches.set(interpreter.GridExecutor, "__init__", _quoted_constexprs(interpreter.GridExecutor.__init__))
    if hasattr(builder, "create_splat"):
        patches.set(builder, "create_splat", _boolean_splat(builder.create_splat))
    return patches.undo


@contextmanager
def installed(hint_log: HintLog | None = None) -> Iterator[None]:
    undo = install(hint_log)
    try:
        yield
    finally:
        undo()


# --------------------------------------------------------------------------- telling limits from bugs


def is_interpreter_limit(exc: BaseException) -> bool:
    """True when `exc` left a kernel that Triton's interpreter was running (an InterpreterError in the
    chain) and its root cause is the interpreter's, not the code's: a NotImplementedError (inline asm,
    a libdevice function without a CPU version, ...) or a Triton builtin reached without the compiler's
    `_semantic` (one the interpreter does not re-bind). Errors of the code itself (wrong shapes, a block
    that is not a power of two, a failed static_assert, a missing name) are not limits."""
    from triton.runtime.errors import InterpreterError

    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    if not any(isinstance(e, InterpreterError) for e in chain):
        return False
    root = chain[-1]
    if isinstance(root, NotImplementedError):
        return True
    try:
        message = str(root)
    except Exception:
        return False
    return isinstance(root, ValueError) and SEMANTIC_MESSAGE in message


__all__ = ["LIBDEVICE", "InterpreterUnsupported", "compute_libdevice", "install", "installed",
           "is_interpreter_limit", "libdevice_symbols"]
