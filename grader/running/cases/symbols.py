"""Is a required symbol there, the right kind, with the contract's parameters? Pure: from the worker's
description of each symbol (grader.running.worker.kernels.describe_symbol) and the spec."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grader import trap_ids
from grader.authoring.spec import Assignment


@dataclass(frozen=True)
class SymbolProblem:
    """Why a target cannot be run at all (missing, wrong signature, import failure)."""

    trap: str
    message: str
    at_import: bool = False  # importing the file failed (raised, timed out, crashed): nothing of it can run


def check_symbol(target: str, info: Mapping[str, Any], assignment: Assignment, filename: str) -> SymbolProblem | None:
    """Is the student's symbol there, the right kind, with the contract's parameters?"""
    kind = info.get("kind")
    line = info.get("line") or 0
    where = f" ({filename}, line {line})" if line else ""
    if kind == "missing":
        return SymbolProblem(trap_ids.MISSING_SYMBOL, f"{filename} does not define `{target}`.")
    if target in assignment.kernels:
        spec_k = assignment.kernels[target]
        if kind != "kernel":
            return SymbolProblem(
                trap_ids.WRONG_SIGNATURE,
                f"`{target}`{where} must be a Triton kernel (decorated with @triton.jit), "
                f"but it is a {info.get('type', kind)}.",
            )
        if not info.get("triton_class", False):
            return SymbolProblem(
                trap_ids.TAMPERING,
                f"`{target}`{where} is a {info.get('type')} posing as a Triton kernel (a class of its own, not "
                "Triton's JIT/autotune/heuristics object): kernels must be written with @triton.jit.",
            )
        expected = list(spec_k.params)
    else:
        spec_f = assignment.functions[target]
        if kind != "function":
            return SymbolProblem(trap_ids.WRONG_SIGNATURE,
                                 f"`{target}`{where} must be a function, not a {info.get('type')}.")
        expected = list(spec_f.params)
    got = list(info.get("params", []))
    comparable = got if target in assignment.kernels else got[: len(expected)]
    if comparable != expected:
        pairs = enumerate(zip(comparable, expected, strict=False))
        diff = next((i for i, (a, b) in pairs if a != b), min(len(got), len(expected)))
        detail = (
            f"parameter {diff + 1} is `{got[diff]}` but the contract says `{expected[diff]}`"
            if diff < min(len(got), len(expected))
            else f"it has {len(got)} parameters, the contract has {len(expected)}"
        )
        return SymbolProblem(
            trap_ids.WRONG_SIGNATURE,
            f"`{target}`{where} has the wrong signature: {detail}.\n"
            f"  expected: {target}({', '.join(expected)})\n  found:    {target}({', '.join(got)})",
        )
    return None
