"""Inside a worker that runs none of the submission's Python: its Triton kernels built from data.

A kernel host is forked from the sandbox's zygote (which never imported student code) and never imports the
submission. It receives a `KernelBundle` (grader.running.protocol): the source of each kernel's `def`, cut by the
grader from its own copy of the file, and the value of every module-level name as plain data, which the submission's
worker reported after its module ran (grader.running.worker.kernel_report). It checks what each kernel can reach,
defines the functions (a `def` runs no body: only its defaults and annotations, checked the same way) and wraps each
in `triton.jit` itself. Kernel cases, the replay of a wrapper's launches, timing and profiling run here: no
module-level code of the submission, no value it computed other than those numbers, no file the sandbox could write.

What a kernel may reach (checked on its AST, before anything is defined):
- the names of its own parameters and locals, the other kernels and the plain helpers of the file it calls (checked the
  same way), the module-level values that arrived as data, and a small set of builtins (those Triton's compiler
  accepts, and plain arithmetic ones for the interpreter);
- through a module value, only `triton.language` and its submodules, `math`, and `triton.cdiv` /
  `triton.next_power_of_2`, and of those only Triton's and math's own objects (a chain through any other module,
  `triton.runtime.jit.os` say, or to a function another package defined, is refused: Triton's compiler calls any
  Python function a kernel names at compile time);
- no attribute that starts with an underscore, no `import`, `global`, `nonlocal`, class or nested function, and
  `getattr`/`hasattr` only with a literal public name.
A kernel that needs anything else is refused with one line naming the name and the line (`KernelRefused`); on the
interpreter the body itself still runs as Python (the GPU compile check flags what the GPU compiler would refuse).
"""

from __future__ import annotations
import __future__

import ast
import builtins
import hashlib
import importlib
import linecache
import sys
import types
from collections.abc import Mapping
from typing import Any

import triton
import triton.language as tl

from grader.running import protocol

MODULE_NAME = "submission"  # as the submission's worker names the module it imports
SAFE_BUILTIN_NAMES = (
    # what Triton's code generator resolves itself, and print/min/max
    "len", "list", "range", "float", "int", "isinstance", "getattr", "hasattr", "print", "min", "max",
    # plain Python a kernel body may use in the interpreter
    "abs", "bool", "tuple", "enumerate", "zip", "round", "pow", "divmod", "any", "all", "reversed", "sum", "map",
    "slice", "str", "dict", "set", "sorted", "filter",
    "Exception", "ValueError", "TypeError", "RuntimeError", "AssertionError", "NotImplementedError", "IndexError",
    "KeyError", "ZeroDivisionError", "ArithmeticError", "OverflowError",
)
ALLOWED_MODULE_PREFIXES = ("triton.language",)
ALLOWED_MODULES = ("triton", "triton.language", "math")
TRITON_TOP_LEVEL = ("language", "cdiv", "next_power_of_2")
FORBIDDEN_NODES = (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.ClassDef, ast.AsyncFunctionDef,
                   ast.Await, ast.Yield, ast.YieldFrom, ast.Lambda)


class KernelRefused(Exception):
    """A kernel needs something a process that runs none of the submission's Python cannot give it."""


def bundle_digest(bundle: protocol.KernelBundle) -> str:
    """SHA-256 of everything a bundle carries but its digest (the grader computes it too: grader.running.bundle)."""
    return protocol.kernel_bundle_digest(bundle)


def _allowed_module(name: str) -> types.ModuleType | None:
    """The module `name` where kernels may use it (imported now if it is not yet: Triton's own submodules load
    lazily, from the interpreter's installation, never from a path the sandbox can write), else None."""
    if not _module_allowed(name):
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _module_allowed(name: str) -> bool:
    return name in ALLOWED_MODULES or any(name.startswith(p + ".") or name == p for p in ALLOWED_MODULE_PREFIXES)


def _reach(root: Any, path: list[str], where: str) -> Any:
    """Follow `root.a.b...` (root a module) as a kernel would; KernelRefused where it leaves what kernels may reach."""
    value = root
    for depth, attr in enumerate(path):
        if not isinstance(value, types.ModuleType):
            return value  # attributes of a value (a dtype's, say): checked by the underscore rule
        if value.__name__ == "triton" and attr not in TRITON_TOP_LEVEL:
            raise KernelRefused(f"{where}: `triton.{attr}` is not something a kernel can use (only triton.language, "
                                "triton.cdiv and triton.next_power_of_2)")
        try:
            value = getattr(value, attr)
        except AttributeError:
            return None  # the compiler says what is missing
        dotted = ".".join(path[: depth + 1])
        if isinstance(value, types.ModuleType):
            if not _module_allowed(value.__name__):
                raise KernelRefused(f"{where}: `{dotted}` is the module {value.__name__}, which kernels cannot use")
            continue
        owner = getattr(value, "__module__", None)
        if isinstance(owner, str) and not (owner.split(".")[0] == "triton" or owner == "math"):
            raise KernelRefused(f"{where}: `{dotted}` comes from {owner}, which kernels cannot use")
    return value


def decode_global(encoded: Any, kernels: Mapping[str, Any], name: str) -> Any:
    """A module-level value from its plain-data form (grader.running.worker.kernel_report.encode_global)."""
    if encoded is None or type(encoded) in (bool, int, float, str):
        return encoded
    if not isinstance(encoded, dict) or len(encoded) != 1:
        raise KernelRefused(f"the value of `{name}` did not arrive as data")
    (kind, value), = encoded.items()
    if kind == "constexpr":
        return tl.constexpr(decode_global(value, kernels, name))
    if kind == "tl_dtype" and isinstance(value, str):
        return tl.dtype(value)
    if kind == "tuple" and isinstance(value, list):
        return tuple(decode_global(v, kernels, name) for v in value)
    if kind in ("kernel", "function") and isinstance(value, str):
        if value not in kernels:
            raise KernelRefused(f"`{name}` is the {kind} {value}, whose source the grader did not find in the file")
        return kernels[value]
    if kind == "module" and isinstance(value, str):
        module = _allowed_module(value)
        if module is None:
            raise KernelRefused(f"`{name}` is the module {value}, which kernels cannot use")
        return module
    if kind == "object" and isinstance(value, str):
        module_name, _, attr = value.rpartition(".")
        while module_name and _allowed_module(module_name) is None:
            module_name, _, head = module_name.rpartition(".")
            attr = f"{head}.{attr}"
        if not module_name:
            raise KernelRefused(f"`{name}` is {value}, which kernels cannot use")
        found = _reach(sys.modules[module_name], attr.split("."), f"`{name}`")
        if found is None:
            raise KernelRefused(f"`{name}` is {value}, which does not exist here")
        return found
    if kind == "unsupported":
        raise KernelRefused(f"`{name}` is a {value}")
    raise KernelRefused(f"the value of `{name}` did not arrive as data")


# --------------------------------------------------------------------------------------------- the AST checks


class _Bound(ast.NodeVisitor):
    """Names a function binds itself: parameters, assignment and loop targets, comprehension variables."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self.names.add(node.id)

    def visit_arg(self, node: ast.arg) -> None:
        self.names.add(node.arg)


def _chain(node: ast.Attribute) -> tuple[str, list[str]] | None:
    path: list[str] = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        path.append(current.attr)
        current = current.value
    if isinstance(current, ast.Name):
        return current.id, list(reversed(path))
    return None


def check_kernel(node: ast.FunctionDef, filename: str, namespace: Mapping[str, Any], needed: set[str],
                 skip_annotations: bool) -> None:
    """KernelRefused if the kernel reaches outside what kernels may (the module's docstring); adds to `needed` every
    module-level name it mentions."""
    bound = _Bound()
    bound.visit(node)
    local = bound.names
    annotation_nodes: set[int] = set()
    if skip_annotations:
        for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg,
                    node.args.kwarg]:
            if arg is not None and arg.annotation is not None:
                annotation_nodes.update(id(n) for n in ast.walk(arg.annotation))
        if node.returns is not None:
            annotation_nodes.update(id(n) for n in ast.walk(node.returns))
    for sub in ast.walk(node):
        if id(sub) in annotation_nodes:
            continue
        where = f"{filename}, line {getattr(sub, 'lineno', node.lineno)}, in {node.name}"
        if isinstance(sub, FORBIDDEN_NODES) or (isinstance(sub, ast.FunctionDef) and sub is not node):
            raise KernelRefused(f"{where}: a kernel cannot contain {type(sub).__name__.lower()} statements")
        if isinstance(sub, ast.Attribute) and sub.attr.startswith("_"):
            raise KernelRefused(f"{where}: `.{sub.attr}`: kernels cannot use names that start with an underscore")
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in ("getattr", "hasattr") \
                and sub.func.id not in local:
            name_arg = sub.args[1] if len(sub.args) > 1 else None
            if not (isinstance(name_arg, ast.Constant) and isinstance(name_arg.value, str)
                    and not name_arg.value.startswith("_")):
                raise KernelRefused(f"{where}: {sub.func.id}() needs a literal attribute name that does not start "
                                    "with an underscore")
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in local:
            if sub.id.startswith("__"):
                raise KernelRefused(f"{where}: `{sub.id}`: kernels cannot use names that start with an underscore")
            needed.add(sub.id)
        if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Load):
            chain = _chain(sub)
            if chain is not None and chain[0] not in local and isinstance(namespace.get(chain[0]), types.ModuleType):
                _reach(namespace[chain[0]], chain[1], where)


# --------------------------------------------------------------------------------------------- building


def build_module(bundle: protocol.KernelBundle) -> tuple[types.ModuleType, dict[str, str]]:
    """The module of the bundle's kernels, and for each symbol that could not be built, why (one line each).
    Raises KernelRefused only when the bundle as a whole cannot be read."""
    try:
        tree = ast.parse(bundle.source, bundle.filename)
    except SyntaxError as exc:
        raise KernelRefused(f"the kernels' source does not parse: {exc}") from None
    nodes = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    module = types.ModuleType(MODULE_NAME)
    namespace = module.__dict__
    namespace["__builtins__"] = {name: getattr(builtins, name) for name in SAFE_BUILTIN_NAMES}
    namespace["__file__"] = bundle.filename
    refused: dict[str, str] = {}  # def name -> why
    placeholders = {name: object() for name in nodes}  # a kernel's value, before the kernels exist
    values: dict[str, Any] = {}
    problems: dict[str, str] = {}  # global name -> why it cannot be had
    for name, encoded in bundle.values.items():
        if not isinstance(name, str) or name.startswith("__"):
            continue
        try:
            values[name] = decode_global(encoded, placeholders, name)
        except KernelRefused as exc:
            problems[name] = str(exc)
    probe = {**values, **placeholders}
    uses: dict[str, set[str]] = {}
    for def_name, node in nodes.items():
        needed: set[str] = set()
        uses[def_name] = needed
        try:
            check_kernel(node, bundle.filename, probe, needed, bundle.future_annotations)
        except KernelRefused as exc:
            refused[def_name] = str(exc)
            continue
        for name in sorted(needed):
            if name in problems and name not in nodes:
                refused[def_name] = (f"{bundle.filename}, kernel {def_name} uses the module-level name "
                                     f"{problems[name]}, which the grader cannot hand to a process that runs none "
                                     "of your Python: make it a number, a string, a tl.constexpr or a tl dtype")
                break
    changed = True
    while changed:  # a kernel that calls a refused kernel or helper cannot run either
        changed = False
        for def_name, needed in uses.items():
            blocked = next((n for n in sorted(needed) if n in refused and n != def_name), None)
            if def_name not in refused and blocked is not None:
                refused[def_name] = refused[blocked]
                changed = True
    namespace.update({k: v for k, v in values.items() if not any(v is p for p in placeholders.values())})
    namespace["__annotations__"] = {name: tl.constexpr for name in bundle.constexpr_annotated if name in values}
    lines = bundle.source.splitlines(keepends=True)
    linecache.cache[bundle.filename] = (len(bundle.source), None, lines, bundle.filename)
    flags = __future__.annotations.compiler_flag if bundle.future_annotations else 0
    code = compile(tree, bundle.filename, "exec", flags=flags, dont_inherit=True)
    sys.modules[MODULE_NAME] = module
    exec(code, namespace)  # noqa: S102 - only `def` statements, each checked above: no body runs
    options = {d["name"]: d.get("options", {}) for d in bundle.defs if isinstance(d, Mapping)}
    plain = {d["name"] for d in bundle.defs if isinstance(d, Mapping) and d.get("plain") is True}
    for def_name in nodes:
        function = namespace.pop(def_name)
        if def_name in refused:
            continue
        # a plain helper a kernel calls stays a function (checked like a kernel: the interpreter runs it as Python,
        # a GPU compiler calls it while compiling)
        namespace[def_name] = function if def_name in plain else triton.jit(
            function, **_jit_options(options.get(def_name, {})))
    for name, encoded in bundle.values.items():  # globals that hold kernels, wrapped or not, are the bare kernel
        if isinstance(encoded, dict) and len(encoded) == 1:
            target = encoded.get("kernel", encoded.get("function"))
            if isinstance(target, str) and target in namespace:
                namespace[name] = namespace[target]
    why = {}
    for symbol, info in bundle.symbols.items():
        def_name = str(info.get("def", ""))
        if def_name in refused:
            why[symbol] = refused[def_name]
        elif def_name not in nodes:
            why[symbol] = f"the grader found no `def {def_name}` in {bundle.filename} for `{symbol}`"
    return module, why


def _jit_options(options: Mapping[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for name in ("do_not_specialize", "do_not_specialize_on_alignment"):
        values = options.get(name)
        if isinstance(values, list) and all(type(v) in (int, str) for v in values):
            kept[name] = list(values)
    for name in ("debug", "noinline"):
        if type(options.get(name)) is bool:
            kept[name] = options[name]
    return kept


def forget_untrusted_paths(trusted: tuple[str, ...]) -> None:
    """Drop every import path but the interpreter's own and `trusted`: the folder the zygote started in (the
    sandbox's, which the submission's worker can write) must not supply a module this process imports later."""
    keep = [p for p in sys.path if p and (p.startswith(sys.prefix) or p.startswith(sys.base_prefix)
                                          or any(p.startswith(t) for t in trusted))]
    sys.path[:] = keep
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()


def digest_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
