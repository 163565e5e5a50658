"""A submission reduced to its Triton kernels: what a process may load without running student Python.

Timed runs must execute none of the submission's Python (a module that patches `do_bench` or
`torch.cuda.Event.elapsed_time` at import would otherwise forge its own timings). `kernels_only`
keeps, from the submission's source:

- imports of `triton`, `math` and `torch` (and `from __future__`), also inside a `try` that holds
  nothing but imports (the usual libdevice fallback);
- module-level constants whose value is built only from literals, kept names, attributes of those
  modules and calls of `triton` / `math` functions (`BLOCK = tl.constexpr(128)`, `erf = tl.math.erf`,
  `SQRT1_2 = 1 / math.sqrt(2.0)`);
- every function decorated with `triton.jit`, with its decorators replaced by a plain `@triton.jit`
  (autotune and heuristics dropped: the timed launches carry the configuration the student's run
  chose). Defaults and annotations must be constants too.

Everything else becomes blank lines, so line numbers still match the student's file. A function body
is never run by Python: Triton compiles it. Pure: text in, text out.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

ALLOWED_MODULES = ("triton", "math", "torch")
CALLABLE_MODULES = ("triton", "math")  # module functions a constant may call
SAFE_BUILTINS = {"min", "max", "abs", "int", "float", "round", "len", "tuple", "bool"}
INJECTED = "__grader_triton"


@dataclass(frozen=True)
class KernelSource:
    text: str  # the reduced module
    kernels: tuple[str, ...]  # the @triton.jit functions kept
    dropped: tuple[tuple[int, str], ...]  # (line, what) of each top-level statement left out


def kernels_only(source: str) -> KernelSource:
    tree = ast.parse(source)
    lines = source.splitlines()
    keep = [False] * (len(lines) + 2)  # 1-based
    aliases: dict[str, str] = {}  # local name -> dotted module or attribute path
    known: set[str] = set()
    kernels: list[str] = []
    dropped: list[tuple[int, str]] = []
    decorator_lines: dict[int, str] = {}  # the line that gets `@triton.jit(...)`, per kept function

    def mark(node: ast.stmt, first: int | None = None) -> None:
        for n in range((first or node.lineno), (node.end_lineno or node.lineno) + 1):
            keep[n] = True

    for node in tree.body:
        if _imports_only(node, aliases):
            mark(node)
            known.update(_bound_names(node))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and _safe_constant(node, aliases, known):
            mark(node)
            known.update(_bound_names(node))
        elif isinstance(node, ast.FunctionDef) and _is_jit(node, aliases):
            problem = _signature_problem(node, aliases, known)
            if problem:
                dropped.append((node.lineno, f"kernel {node.name}: {problem}"))
                continue
            first = min(d.lineno for d in node.decorator_list)
            mark(node, first)
            for d in node.decorator_list:
                for n in range(d.lineno, (d.end_lineno or d.lineno) + 1):
                    keep[n] = False  # the decorators are replaced
            decorator_lines[node.decorator_list[-1].end_lineno or node.lineno - 1] = _jit_decorator(node, aliases)
            kernels.append(node.name)
            known.add(node.name)
        elif not isinstance(node, ast.Expr) or not isinstance(getattr(node, "value", None), ast.Constant):
            dropped.append((node.lineno, _describe(node)))

    out = []
    for number, line in enumerate(lines, 1):
        if number in decorator_lines:
            out.append(decorator_lines[number])
        else:
            out.append(line if keep[number] else "")
    text = _with_injected_import(out, kernels, tree)
    return KernelSource(text, tuple(kernels), tuple(dropped))


def _with_injected_import(out: list[str], kernels: list[str], tree: ast.Module) -> str:
    """`import triton as __grader_triton` on a free line before the first kept kernel (else on top)."""
    first_kernel = min((n.lineno for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in kernels),
                       default=len(out) + 1)
    future_end = max((n.end_lineno or n.lineno for n in tree.body
                      if isinstance(n, ast.ImportFrom) and n.module == "__future__"), default=0)
    statements = [(n.lineno, n.end_lineno or n.lineno) for n in tree.body]
    for index in range(future_end, min(first_kernel - 2, len(out))):
        number = index + 1
        inside = any(a < number <= b or a <= number < b for a, b in statements if a != b)
        if not out[index].strip() and not inside:
            out[index] = f"import triton as {INJECTED}"
            return "\n".join(out) + "\n"
    return f"import triton as {INJECTED}\n" + "\n".join(out) + "\n"


def _dotted(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _resolve(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """`tl.math.erf` -> `triton.language.math.erf` when `tl` was imported as triton.language."""
    dotted = _dotted(node)
    if dotted is None:
        return None
    head, _, rest = dotted.partition(".")
    if head not in aliases:
        return None
    return aliases[head] + ("." + rest if rest else "")


def _allowed(module: str | None) -> bool:
    return module is not None and (module == "__future__" or module.split(".")[0] in ALLOWED_MODULES)


def _imports_only(node: ast.stmt, aliases: dict[str, str]) -> bool:
    if isinstance(node, ast.Import):
        if not all(_allowed(a.name) for a in node.names):
            return False
        for a in node.names:
            aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        return True
    if isinstance(node, ast.ImportFrom):
        if node.level or not _allowed(node.module) or any(a.name == "*" for a in node.names):
            return False
        for a in node.names:
            aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        return True
    if isinstance(node, ast.Try):
        blocks = [node.body, node.orelse, node.finalbody] + [h.body for h in node.handlers]
        statements = [s for block in blocks for s in block]
        if statements and all(isinstance(s, (ast.Import, ast.ImportFrom, ast.Pass)) for s in statements):
            return all(_imports_only(s, aliases) for s in statements if not isinstance(s, ast.Pass))
    return False


def _bound_names(node: ast.stmt) -> set[str]:
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            names.add(sub.id)
        elif isinstance(sub, ast.alias):
            names.add(sub.asname or sub.name.split(".")[0])
    return names


def _safe_expr(node: ast.expr | None, aliases: dict[str, str], known: set[str]) -> bool:
    if node is None:
        return True
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id in known or node.id in SAFE_BUILTINS or node.id in aliases
    if isinstance(node, ast.Attribute):
        return _resolve(node, aliases) is not None
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_safe_expr(e, aliases, known) for e in node.elts)
    if isinstance(node, ast.UnaryOp):
        return _safe_expr(node.operand, aliases, known)
    if isinstance(node, ast.BinOp):
        return _safe_expr(node.left, aliases, known) and _safe_expr(node.right, aliases, known)
    if isinstance(node, ast.BoolOp):
        return all(_safe_expr(v, aliases, known) for v in node.values)
    if isinstance(node, ast.Compare):
        return _safe_expr(node.left, aliases, known) and all(_safe_expr(c, aliases, known) for c in node.comparators)
    if isinstance(node, ast.Call):
        target = _resolve(node.func, aliases)
        callable_ok = (target is not None and target.split(".")[0] in CALLABLE_MODULES) or (
            isinstance(node.func, ast.Name) and node.func.id in SAFE_BUILTINS and node.func.id not in known)
        return callable_ok and all(_safe_expr(a, aliases, known) for a in node.args) and all(
            _safe_expr(k.value, aliases, known) for k in node.keywords)
    return False


def _safe_constant(node: ast.Assign | ast.AnnAssign, aliases: dict[str, str], known: set[str]) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    if not all(isinstance(t, ast.Name) for t in targets):
        return False
    if isinstance(node, ast.AnnAssign) and not _safe_expr(node.annotation, aliases, known):
        return False
    return node.value is not None and _safe_expr(node.value, aliases, known)


def _is_jit(node: ast.FunctionDef, aliases: dict[str, str]) -> bool:
    return any(_jit_target(d, aliases) for d in node.decorator_list)


def _jit_target(decorator: ast.expr, aliases: dict[str, str]) -> bool:
    func = decorator.func if isinstance(decorator, ast.Call) else decorator
    return _resolve(func, aliases) in ("triton.jit", "triton.runtime.jit", "triton.runtime.jit.jit")


def _jit_decorator(node: ast.FunctionDef, aliases: dict[str, str]) -> str:
    """`@__grader_triton.jit`, keeping the literal keyword arguments of the student's `triton.jit(...)`."""
    for decorator in node.decorator_list:
        if _jit_target(decorator, aliases) and isinstance(decorator, ast.Call):
            keywords = [k for k in decorator.keywords if k.arg and _literal(k.value)]
            if keywords:
                args = ", ".join(f"{k.arg}={ast.unparse(k.value)}" for k in keywords)
                return f"@{INJECTED}.jit({args})"
    return f"@{INJECTED}.jit"


def _literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True


def _signature_problem(node: ast.FunctionDef, aliases: dict[str, str], known: set[str]) -> str:
    args = node.args
    for default in [*args.defaults, *[d for d in args.kw_defaults if d is not None]]:
        if not _safe_expr(default, aliases, known):
            return f"a default value at line {default.lineno} is not a constant"
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    for arg in every:
        if arg is not None and arg.annotation is not None and not _safe_expr(arg.annotation, aliases, known):
            return f"the annotation of `{arg.arg}` is not a constant"
    return ""


def _describe(node: ast.stmt) -> str:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return f"{type(node).__name__.replace('Def', '').lower()} {node.name}"
    return type(node).__name__.lower()
