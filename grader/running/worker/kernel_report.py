"""Inside the submission's worker, after its module ran: its kernels described as plain data, so that a process that
runs none of the submission's Python (grader.running.worker.kernel_host) can build the same kernels.

The report names every Triton kernel reachable from the module's globals (the `def` under any autotune or heuristics
wrapper: its name, first line and JIT options) and every plain function of the file a kernel calls (a helper without
@triton.jit: the interpreter runs it as Python, a GPU compiler calls it while compiling), which def each global that
holds a kernel stands for (and the meta-parameters autotune or heuristics choose for it), and the value of every
module-level name, encoded as data:
numbers, strings, booleans, None, `tl.constexpr`s and tuples of those, Triton dtypes, modules (by name), kernels (by
their def's name) and objects of `triton` or `math` (by dotted path); anything else only by its type, so the kernel
host can say which name a kernel needs that it cannot have. The report is the worker's word: the grader takes the
kernels' source from its own copy of the file, and the host checks every value it is given.
"""

from __future__ import annotations

import inspect
import types
from typing import Any

import triton
import triton.language as tl

from grader.running.worker.kernels import TUNERS, tuned_meta

MAX_GLOBALS = 4000  # module-level names reported (a module with more is not a kernel file)
MAX_TEXT = 10_000  # characters of one string value
MAX_DEPTH = 4  # nesting of tuples
LIBRARY_ROOTS = ("triton", "math")  # objects of these modules travel by dotted path


def innermost_jit(obj: Any) -> Any:
    """The JIT (or interpreted) function under any autotune or heuristics wrapper; None if there is none."""
    seen = 0
    while isinstance(obj, triton.runtime.KernelInterface) and seen < 10:
        if not isinstance(obj, TUNERS) and inspect.isfunction(getattr(obj, "fn", None)):
            return obj
        obj = getattr(obj, "fn", None)
        seen += 1
    return None


def _def_of(jit: Any) -> dict[str, Any]:
    fn = jit.fn
    options: dict[str, Any] = {}
    for name in ("do_not_specialize", "do_not_specialize_on_alignment"):
        values = [v for v in (getattr(jit, name, None) or []) if type(v) in (int, str)]
        if values:
            options[name] = values
    for name in ("debug", "noinline"):
        value = getattr(jit, name, None)
        if type(value) is bool:
            options[name] = value
    return {"name": fn.__name__, "line": int(fn.__code__.co_firstlineno), "options": options}


def encode_global(value: Any, depth: int = 0) -> Any:
    """A module-level value as plain data (see the module's docstring); {"unsupported": type} otherwise."""
    if value is None or type(value) in (bool, int, float):
        return value
    if type(value) is str:
        return value if len(value) <= MAX_TEXT else {"unsupported": "str (too long)"}
    if isinstance(value, tl.constexpr):
        inner = encode_global(value.value, depth + 1)
        return {"constexpr": inner}
    if isinstance(value, tl.dtype):
        return {"tl_dtype": value.name}
    if isinstance(value, types.ModuleType):
        return {"module": value.__name__}
    if isinstance(value, triton.runtime.KernelInterface):
        jit = innermost_jit(value)
        return {"kernel": jit.fn.__name__} if jit is not None else {"unsupported": type(value).__name__}
    if type(value) in (tuple, list) and depth < MAX_DEPTH:
        return {"tuple": [encode_global(v, depth + 1) for v in value]}
    module = getattr(value, "__module__", None)
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if (isinstance(module, str) and isinstance(name, str) and module.split(".")[0] in LIBRARY_ROOTS
            and "<" not in name):
        return {"object": f"{module}.{name}"}
    return {"unsupported": type(value).__name__}


def _names_used(code: types.CodeType) -> set[str]:
    """Every name a function's code (and the code nested in it) mentions."""
    found = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found |= _names_used(const)
    return found


def _helpers(module: Any, kernels: list[Any]) -> dict[str, Any]:
    """Plain functions of the file (not kernels) that the kernels' code names, and those they name in turn."""
    namespace = vars(module)
    filename = getattr(module, "__file__", None)
    found: dict[str, Any] = {}
    todo = [k.fn for k in kernels]
    while todo:
        code = todo.pop().__code__
        for name in _names_used(code):
            value = namespace.get(name)
            if (name not in found and inspect.isfunction(value)
                    and not isinstance(value, triton.runtime.KernelInterface)
                    and value.__code__.co_filename == filename):
                found[name] = value
                todo.append(value)
    return found


def describe_kernels(module: Any) -> dict[str, Any]:
    """The module's kernels, their plain helpers and its module-level values as plain data (the load reply's
    `kernels`)."""
    names = list(vars(module))[:MAX_GLOBALS]
    defs: dict[str, dict[str, Any]] = {}
    symbols: dict[str, dict[str, Any]] = {}
    values: dict[str, Any] = {}
    for name in names:
        value = vars(module).get(name)
        if name.startswith("__") and name.endswith("__"):
            continue
        if isinstance(value, triton.runtime.KernelInterface):
            jit = innermost_jit(value)
            if jit is not None:
                found = _def_of(jit)
                defs.setdefault(found["name"], found)
                symbols[name] = {"def": found["name"], "tuned": tuned_meta(value),
                                 "wrapped": value is not jit}
        try:
            values[name] = encode_global(value)
        except Exception:  # a value that cannot even be looked at travels as nothing
            values[name] = {"unsupported": "object"}
    jits = [innermost_jit(v) for v in vars(module).values() if isinstance(v, triton.runtime.KernelInterface)]
    for name, helper in _helpers(module, [j for j in jits if j is not None]).items():
        defs.setdefault(helper.__name__, {"name": helper.__name__, "line": int(helper.__code__.co_firstlineno),
                                          "options": {}, "plain": True})
        values[name] = {"function": helper.__name__}
    annotations = getattr(module, "__annotations__", None)
    constexpr_annotated = []
    if isinstance(annotations, dict):
        constexpr_annotated = [str(k) for k, v in annotations.items() if v is tl.constexpr or v == "tl.constexpr"]
    return {"defs": list(defs.values()), "symbols": symbols, "globals": values,
            "constexpr_annotated": constexpr_annotated}
