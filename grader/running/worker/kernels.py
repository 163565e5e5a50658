"""Inside the worker: the submission's Triton kernels under any wrapper (JIT, interpreter, autotune, heuristics):
what a symbol is, a contract's grid, the kernel a replay runs, compiling ahead of time for a GPU, and the seconds
Triton's JIT spends compiling."""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import triton

from grader.running.worker import progress

try:
    from triton.runtime.autotuner import Autotuner, Heuristics

    TUNERS: tuple[type, ...] = (Autotuner, Heuristics)
except ImportError:  # pragma: no cover - every supported triton has them
    TUNERS = ()


def kernel_function(obj: Any) -> Any:
    """The Python function under any Triton wrapper (JIT, interpreter, autotune, heuristics)."""
    seen = 0
    while not inspect.isfunction(obj) and hasattr(obj, "fn") and seen < 10:
        obj = obj.fn
        seen += 1
    return obj


def tuned_meta(obj: Any) -> list[str]:
    """Meta-parameters chosen by @autotune configs or @heuristics along the wrapper chain."""
    names: set[str] = set()
    seen = 0
    while isinstance(obj, triton.runtime.KernelInterface) and seen < 10:
        for config in getattr(obj, "configs", None) or []:
            names.update(getattr(config, "kwargs", {}) or {})
        values = getattr(obj, "values", None)
        if isinstance(values, dict):
            names.update(values)
        obj = getattr(obj, "fn", None)
        seen += 1
    return sorted(names)


def describe_symbol(obj: Any) -> dict[str, Any]:
    if obj is None:
        return {"kind": "missing"}
    is_kernel = isinstance(obj, triton.runtime.KernelInterface)
    fn = kernel_function(obj) if is_kernel else obj
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    try:
        line = inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):
        line = 0
    kind = "kernel" if is_kernel else ("function" if callable(obj) else "other")
    return {
        "kind": kind,
        "type": type(obj).__name__,
        # a kernel must be Triton's own object, not a look-alike class whose `run` does the work in Python
        "triton_class": type(obj).__module__.split(".")[0] == "triton",
        "params": params,
        "line": line,
        "tuned": tuned_meta(obj) if is_kernel else [],
    }


def make_grid(exprs: Sequence[str]) -> Callable[[dict[str, Any]], tuple[int, ...]]:
    helpers = {"cdiv": triton.cdiv, "next_power_of_2": triton.next_power_of_2, "max": max, "min": min}

    def grid(meta: dict[str, Any]) -> tuple[int, ...]:
        scope = {**meta, **helpers}
        return tuple(int(eval(expr, {"__builtins__": {}}, scope)) for expr in exprs)  # noqa: S307

    return grid


def replayable_kernel(module: Any, name: str) -> Any:
    """The innermost JIT function called `name` among the module's kernels (under any autotune or
    heuristics wrapper): a replay runs exactly the recorded configuration, without re-tuning."""
    for obj in vars(module).values():
        seen = 0
        while isinstance(obj, triton.runtime.KernelInterface) and seen < 10:
            if not isinstance(obj, TUNERS) and getattr(getattr(obj, "fn", None), "__name__", None) == name:
                return obj
            obj = getattr(obj, "fn", None)
            seen += 1
    raise LookupError(f"the submission has no Triton kernel named {name!r}")


def compile_for_gpu(kernel: Any, signature: dict[str, str], constexprs: dict[str, Any], arch: int) -> None:
    """Ahead-of-time compile for a CUDA target; works on a machine with no GPU."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    jit = kernel
    seen = 0
    while not isinstance(jit, triton.runtime.JITFunction) and hasattr(jit, "fn") and seen < 10:
        jit = jit.fn
        seen += 1
    if not isinstance(jit, triton.runtime.JITFunction):
        raise TypeError(f"{type(kernel).__name__} is not a compilable Triton kernel")
    triton.compile(ASTSource(jit, signature, constexprs), target=GPUTarget("cuda", arch, 32))


def patch_autotune_for_interpreter() -> None:
    """Multi-config @autotune benchmarks on a GPU driver; in the interpreter run each config once."""
    from triton.runtime.autotuner import Autotuner

    def run_once(kernel_call, quantiles=None, **_):
        kernel_call()
        return [0.0] * (len(quantiles) if quantiles else 1)

    Autotuner.do_bench = property(lambda self: run_once)  # type: ignore[assignment]


_COMPILE_SECONDS = [0.0]


def time_jit_compiles() -> None:
    """Add up the seconds Triton's JIT spends compiling: the grade's "compile" phase, reported with every reply
    (informational; nothing is judged on it), each one between compile marks for the grader's deadlines. Two steps:
    `JITFunction._do_compile` (the kernel: ptxas) and, at a compiled kernel's first run, `CompiledKernel._init_handles`
    (its launcher, a C stub gcc builds for each new signature where the Triton cache has none, and the module's load).
    Unmarked, the second ran after the launch's mark: in a class of 16 starting at once, gcc past 5 s read as
    "nothing happened for 5 s after its last kernel launch" and correct files lost cases (an H100, session 13)."""
    from triton.compiler.compiler import CompiledKernel

    # every launch calls _init_handles; only a kernel whose module is not loaded yet does the work (and is marked)
    for cls, name, pending in ((triton.runtime.JITFunction, "_do_compile", None),
                               (CompiledKernel, "_init_handles", lambda kernel: kernel.module is None)):
        original = cls.__dict__.get(name)
        if original is not None and not getattr(original, "_grader_wrapped", False):
            setattr(cls, name, _marked_compile(original, pending))


def _marked_compile(original: Callable[..., Any],
                    pending: Callable[[Any], bool] | None = None) -> Callable[..., Any]:
    """`original` between compile marks, its seconds added to the compile time (only where `pending` says it has work
    to do, when given)."""

    def compiling(self: Any, *args: Any, **kwargs: Any) -> Any:
        if pending is not None and not pending(self):
            return original(self, *args, **kwargs)
        started = time.monotonic()
        progress.mark(progress.COMPILE_START)
        try:
            return original(self, *args, **kwargs)
        finally:
            progress.mark(progress.COMPILE_END)
            _COMPILE_SECONDS[0] += time.monotonic() - started

    compiling._grader_wrapped = True  # type: ignore[attr-defined]
    return compiling


def add_compile_seconds(seconds: float) -> None:
    """Compile time spent outside `JITFunction._do_compile` (the parallel warm-up's)."""
    _COMPILE_SECONDS[0] += seconds


def compile_seconds() -> float:
    """Triton's JIT compile seconds in this worker so far (every reply carries them)."""
    return round(float(_COMPILE_SECONDS[0]), 4)


# one launch to compile ahead: the kernel, its arguments, its grid and its keyword arguments, as `warmup` takes them
WarmupCall = tuple[Any, Sequence[Any], Any, Mapping[str, Any]]


def compile_in_parallel(calls: Sequence[WarmupCall], threads: int) -> tuple[int, int]:
    """Compile each call's kernel specialisation (`kernel.warmup(*args, grid=grid, **kwargs)`), `threads` at once under
    Triton's AsyncCompileMode, then build their launchers and load them (load_compiled); nothing is launched. The pool
    compiles after each `_do_compile` returned (its own marks cover only the submit), so the whole pool runs between
    compile marks: the grader's deadline credits those seconds as compiling. Returns how many calls warmed up and how
    many kernels were loaded; a failure is left for the real launch, which reports it with the student's line."""
    from triton.runtime._async_compile import AsyncCompileMode

    warmed = []
    started = time.monotonic()
    progress.mark(progress.COMPILE_START)
    try:
        with ThreadPoolExecutor(max_workers=threads) as pool, AsyncCompileMode(pool, ignore_errors=True):
            for call in calls:
                kernel, args, grid, kwargs = call
                try:
                    kernel.warmup(*args, grid=grid, **kwargs)
                except Exception:  # noqa: BLE001 - the real launch reports it
                    continue
                warmed.append(call)
    except Exception:  # noqa: BLE001 - the real launch reports it
        pass
    finally:
        progress.mark(progress.COMPILE_END)
        add_compile_seconds(time.monotonic() - started)
    binaries = []
    for kernel, args, grid, kwargs in warmed:  # compiled now: each found in the cache
        with contextlib.suppress(Exception):  # the real launch reports it
            binaries.append(kernel.warmup(*args, grid=grid, **kwargs))
    return len(warmed), load_compiled(binaries, threads)


def load_compiled(binaries: Iterable[Any], threads: int) -> int:
    """Build each compiled kernel's launcher and load its module, `threads` at once, as its first launch would one by
    one (`CompiledKernel._init_handles`: gcc builds a C launcher for each signature the Triton cache lacks, 0.3 CPU-s
    apiece, then the module is loaded; both let go of the GIL). `binaries`: what `warmup` returned after compiling
    (a compiled kernel, a future of one, or a list of them for an autotuned kernel). Returns how many are loaded; a
    failure is left for the real launch, which reports it with the student's line."""
    pending: dict[int, Any] = {}
    stack = list(binaries)
    while stack:
        binary = stack.pop()
        if isinstance(binary, list | tuple):
            stack.extend(binary)
            continue
        try:
            binary = binary.result() if hasattr(binary, "result") else binary
        except Exception:  # noqa: BLE001 - the real launch reports it
            continue
        if hasattr(binary, "_init_handles"):
            pending[id(binary)] = binary
    if not pending or not _driver_ready():
        return 0
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        return sum(pool.map(_loaded, pending.values()))


def _loaded(binary: Any) -> int:
    try:
        binary._init_handles()  # marked as compiling where it has work (time_jit_compiles)
    except Exception:  # noqa: BLE001 - the real launch reports it
        return 0
    return 1


def _driver_ready() -> bool:
    """Triton's GPU driver and its own helpers (a C module built once per process), before any thread wants them;
    False where there is none (the interpreter, no GPU)."""
    try:
        from triton.runtime.driver import driver

        _ = driver.active.utils
    except Exception:  # noqa: BLE001 - the real launch reports it
        return False
    return True
