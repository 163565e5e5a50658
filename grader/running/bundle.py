"""The grader's side of kernels as data: a submission's `KernelBundle`, for the workers that run none of its Python.

Pure: the grader's own copy of the file's text and what the submission's worker reported after its module ran
(grader.running.worker.kernel_report) in, a bundle out. The source of each kernel is cut from the grader's copy (the
worker only says which `def`s are kernels, or plain helpers a kernel calls, by name and first line), each `def` at
its own line so a message names the student's line, its decorators left out (the kernel host applies `triton.jit`
itself) and everything else of the file blank. The module-level values are the worker's report, which the kernel
host checks one by one (grader.running.worker.kernel_host). The bundle's digest covers all of it.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Mapping
from typing import Any

from grader.running.protocol import KernelBundle, kernel_bundle_digest


def _defs(tree: ast.Module) -> list[ast.FunctionDef]:
    """Every `def` at module level, also inside module-level `if`, `try` and `with` blocks (not in functions)."""
    found: list[ast.FunctionDef] = []
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, ast.FunctionDef):
            found.append(node)
        elif isinstance(node, (ast.If, ast.With, ast.Try)):
            blocks = [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
            blocks += [h.body for h in getattr(node, "handlers", [])]
            todo.extend(s for block in blocks for s in block)
    return found


def _first_line(node: ast.FunctionDef) -> int:
    """The line Python reports as a function's first (its first decorator's, if any)."""
    return min([node.lineno, *(d.lineno for d in node.decorator_list)])


def build_bundle(text: str, filename: str, report: Mapping[str, Any]) -> KernelBundle:
    """The kernels of `text` (the grader's copy of the submission) that `report` names, with its values."""
    tree = ast.parse(text)
    lines = text.splitlines()
    out = [""] * len(lines)
    by_place = {(found.name, _first_line(found)): found for found in _defs(tree)}
    defs: list[dict[str, Any]] = []
    reported = report.get("defs", [])
    for entry in reported if isinstance(reported, list) else []:
        if not isinstance(entry, Mapping):
            continue
        name, line = entry.get("name"), entry.get("line")
        node: ast.FunctionDef | None = None
        if isinstance(name, str) and isinstance(line, int):
            node = by_place.get((name, line))
        if node is None:  # a def the file does not hold there: the host says which symbol lacks its kernel
            continue
        end = node.end_lineno or node.lineno
        block = textwrap.dedent("\n".join(lines[node.lineno - 1:end])).splitlines()
        out[node.lineno - 1:end] = block + [""] * (end - node.lineno + 1 - len(block))
        options = entry.get("options")
        defs.append({"name": node.name, "line": node.lineno, "plain": entry.get("plain") is True,
                     "options": dict(options) if isinstance(options, Mapping) else {}})
    symbols = report.get("symbols", {})
    values = report.get("globals", {})
    annotated = report.get("constexpr_annotated", [])
    future = any(isinstance(node, ast.ImportFrom) and node.module == "__future__"
                 and any(alias.name == "annotations" for alias in node.names) for node in tree.body)
    bundle = KernelBundle(
        filename=filename,
        source="\n".join(out) + "\n",
        defs=tuple(defs),
        symbols={str(k): dict(v) for k, v in symbols.items() if isinstance(v, Mapping)} if isinstance(
            symbols, Mapping) else {},
        values=dict(values) if isinstance(values, Mapping) else {},
        constexpr_annotated=tuple(str(a) for a in annotated if isinstance(a, str)) if isinstance(
            annotated, list) else (),
        future_annotations=future,
    )
    return KernelBundle(**{**bundle.__dict__, "digest": kernel_bundle_digest(bundle)})


def wrapped_symbols(bundle: KernelBundle) -> dict[str, tuple[str, ...]]:
    """Symbol -> the meta-parameters autotune or heuristics choose for it, for every symbol the submission wraps
    (the kernel host holds the bare kernel: those values come from a launch in the submission's worker)."""
    found = {}
    for symbol, info in bundle.symbols.items():
        if info.get("wrapped"):
            tuned = info.get("tuned", [])
            found[symbol] = tuple(str(t) for t in tuned) if isinstance(tuned, list) else ()
    return found
