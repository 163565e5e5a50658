"""False hints: promises to the compiler (`tl.multiple_of`, `tl.max_contiguous`, `tl.max_constancy`) that
the values break. Pure: no I/O.

The GPU compiler believes a hint without checking it and vectorises on its word, so a false one is
undefined behaviour there (`CUDA error: misaligned address`, or silently right). Two ways it surfaces:

* In the interpreter the worker checks every hint against the values (grader/running/worker/
  hint_check.py) and sends back the first counterexample of a case; `evidence` keeps it (checked and
  clipped: it comes from the worker) in the case's evidence, and `false_hint_checks` turns the first
  one of each kernel into a zero-point check named `false-hint`: a warning, never points off, since the
  interpreter's outputs do not depend on hints.
* On a GPU, a `misaligned address` fault in a submission whose source makes hints (`hint_calls`) is
  named `false-hint` instead of `runtime-error` or `crash` (grader/judging/errors.py).
* A GPU grade of a submission that makes hints runs its cases in the interpreter too, on the CPU
  (grader/running/cases/cpu_companion.py): `with_cpu_evidence` puts the counterexamples into the GPU cases and
  `as_cpu_grade` lays the cases out as the CPU grade has them, so the warnings have the same words on
  both backends, whether the GPU faulted or got lucky.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from grader import trap_ids
from grader.authoring.spec import Assignment, Case
from grader.results import CaseResult

HINTS = ("multiple_of", "max_contiguous", "max_constancy")
MISALIGNED = "misaligned address"
_PROBLEMS = ("multiple", "run", "constant")
_HINT_CALL = re.compile(r"\b(" + "|".join(HINTS) + r")\s*\(")
MAX_TEXT = 200
MAX_INTS = 16


@dataclass(frozen=True)
class HintCall:
    """A hint written in the submission: where, and the line as written."""

    line: int
    hint: str
    code: str


# --------------------------------------------------------------------------- the worker's counterexample


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def _ints(value: Any, limit: int = MAX_INTS) -> list[int] | None:
    if not isinstance(value, (list, tuple)) or not all(type(v) is int for v in value):
        return None
    return list(value[:limit])


def _text(value: Any) -> str:
    return str(value)[:MAX_TEXT] if isinstance(value, str) else ""


def evidence(raw: Any) -> dict[str, Any] | None:
    """The worker's first counterexample as plain, bounded data; None where it is missing or malformed."""
    if not isinstance(raw, Mapping) or raw.get("hint") not in HINTS or raw.get("problem") not in _PROBLEMS:
        return None
    claimed, index, values, program = (_ints(raw.get(k)) for k in ("claimed", "index", "values", "program"))
    group, dim = _int(raw.get("group")), _int(raw.get("dim"))
    if claimed is None or index is None or values is None or group is None or dim is None:
        return None
    return {
        "hint": raw["hint"], "problem": raw["problem"], "claimed": claimed, "dim": dim, "index": index,
        "group": group, "value": _int(raw.get("value")), "values": values, "program": program or [],
        "kernel": _text(raw.get("kernel")), "function": _text(raw.get("function")),
        "file": _text(raw.get("file")), "line": _int(raw.get("line")) or 0, "code": _text(raw.get("code")),
    }


def _claimed(ev: Mapping[str, Any]) -> str:
    claimed = ev["claimed"]
    return str(claimed[0]) if len(claimed) == 1 else str(claimed)


def describe(ev: Mapping[str, Any]) -> str:
    """One paragraph a student acts on: which promise, where, which values break it."""
    hint = f"tl.{ev['hint']}(..., {_claimed(ev)})"
    where = f"line {ev['line']}" if ev["line"] else "an unknown line"
    if ev["function"]:
        where += f", in {ev['function']}"
    if ev["code"]:
        where += f": `{ev['code']}`"
    program = f"program {tuple(ev['program'])}" if ev["program"] else "one program"
    shown = ", ".join(str(v) for v in ev["values"]) + (", ..." if len(ev["values"]) >= MAX_INTS else "")
    along = f" along dimension {ev['dim']}" if len(ev["claimed"]) > 1 else ""
    at = list(ev["index"])
    size = ev["group"]
    divisor = ev["claimed"][ev["dim"]] if ev["dim"] < len(ev["claimed"]) else ev["claimed"][0]
    if ev["problem"] == "multiple" and size == 1:
        why = (f"in {program} the values{along} are {shown}: they do not come in aligned runs of consecutive "
               f"integers, so the promise covers every element, and element {at} is {ev['value']}, not a "
               f"multiple of {divisor}")
    elif ev["problem"] == "multiple":
        why = (f"in {program} the values{along} ({shown}) come in runs of {size} consecutive integers, and the "
               f"run at element {at} starts at {ev['value']}, not a multiple of {divisor}")
    elif ev["problem"] == "run":
        why = f"in {program} the {size} values{along} from element {at} are {shown}: not {size} consecutive integers"
    else:
        why = f"in {program} the {size} values{along} from element {at} are {shown}: not {size} equal values"
    return f"{hint} ({where}) is false: {why}."


# --------------------------------------------------------------------------- the zero-point checks


def false_hint_checks(cases: Sequence[CaseResult], assignment: Assignment) -> list[CaseResult]:
    """One zero-point check per kernel whose hints some case found false: the first counterexample, from
    a public case where one has it (the check takes that case's visibility)."""
    found: dict[str, list[tuple[CaseResult, dict[str, Any]]]] = {}
    for case in cases:
        ev = evidence(case.evidence.get("false_hint")) if isinstance(case.evidence, Mapping) else None
        if ev is not None:
            kernel = ev["kernel"] or case.target
            found.setdefault(kernel, []).append((case, ev))
    checks = []
    for kernel, seen in found.items():
        case, ev = next(((c, e) for c, e in seen if c.visibility == "public"), seen[0])
        target = kernel if kernel in assignment.kernels else case.target
        others = f" ({len(seen)} cases showed a false hint in {kernel})" if len(seen) > 1 else ""
        message = (f"Warning, no points off: {kernel} makes a promise to the compiler that its values break, in case "
                   f"{case.case_id}{others}. {describe(ev)} The CPU interpreter ignores such promises, but the "
                   "GPU compiler trusts them to vectorise loads and stores: a false one can fault with "
                   "`CUDA error: misaligned address` on the grading GPU, or silently read the wrong elements.")
        checks.append(CaseResult(
            case_id=f"false-hint-{kernel}", target=target, title=f"{kernel}: tl.multiple_of / tl.max_contiguous "
            "promises hold", visibility=case.visibility, max_score=0.0, score=0.0, passed=False, message=message,
            traps=(trap_ids.FALSE_HINT,), evidence={"false_hint": ev, "case": case.case_id},
        ))
    return checks


def with_cpu_evidence(cases: Sequence[CaseResult], found: Mapping[str, Any]) -> list[CaseResult]:
    """A CUDA grade's cases with the interpreter's first false promise of each (grader/running/cases/cpu_companion.py:
    case id -> the worker's counterexample), in their evidence as a CPU grade has it, so `false_hint_checks`
    words the same warnings on both backends. Malformed counterexamples are dropped (`evidence`)."""
    out = []
    for case in cases:
        ev = evidence(found.get(case.case_id))
        if ev is not None and isinstance(case.evidence, Mapping) and "false_hint" not in case.evidence:
            case = replace(case, evidence={**case.evidence, "false_hint": ev})
        out.append(case)
    return out


def as_cpu_grade(cases: Sequence[CaseResult], found: Mapping[str, Any], cpu_cases: Sequence[Case]) -> list[CaseResult]:
    """A CUDA grade's cases as a CPU grade of the same file has them for `false_hint_checks`, so its warnings
    have the same words (the case they name, how many cases showed a false promise): in the CPU grade's order
    (`cpu_cases`, what the interpreter ran), each the GPU case with the interpreter's evidence merged
    (with_cpu_evidence), or for a case only the interpreter runs (tl.dot blocks too small for a GPU, say) a
    stand-in that holds only the evidence."""
    by_id = {c.case_id: c for c in with_cpu_evidence(cases, found)}
    out = []
    for case in cpu_cases:
        got = by_id.get(case.id)
        if got is None:
            ev = evidence(found.get(case.id))
            if ev is None:
                continue
            got = CaseResult(case_id=case.id, target=case.target, title=case.id, visibility=case.visibility,
                             max_score=0.0, score=0.0, passed=True, message="", evidence={"false_hint": ev})
        out.append(got)
    return out


# --------------------------------------------------------------------------- the GPU side


def hint_calls(source: str) -> tuple[HintCall, ...]:
    """Every call of a hint in the submission's source (by its last name: `tl.multiple_of`,
    `multiple_of`), in line order; a line scan where the file does not parse."""
    lines = source.splitlines()
    found: list[HintCall] = []
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        for number, line in enumerate(lines, 1):
            match = _HINT_CALL.search(line)
            if match and not line.lstrip().startswith("#"):
                found.append(HintCall(number, match.group(1), line.strip()[:MAX_TEXT]))
        return tuple(found)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in HINTS:
                code = lines[node.lineno - 1].strip() if 0 < node.lineno <= len(lines) else ""
                found.append(HintCall(node.lineno, name, code[:MAX_TEXT]))
    return tuple(sorted(set(found), key=lambda c: (c.line, c.hint)))


def names_false_hint(text: str, calls: Sequence[HintCall]) -> bool:
    """A GPU fault that a false hint explains: a misaligned address in code that makes hints."""
    return bool(calls) and MISALIGNED in text


def gpu_fault_note(calls: Sequence[HintCall], filename: str) -> str:
    """What a `misaligned address` fault most likely means, for a submission that makes hints."""
    listed = "; ".join(f"line {c.line}: `{c.code}`" for c in calls[:4]) + ("; ..." if len(calls) > 4 else "")
    return (f"A misaligned address in a kernel that promises alignment to the compiler ({filename}: {listed}): the "
            "GPU trusts tl.multiple_of / tl.max_contiguous without checking, and one of them is most likely false "
            "on these shapes (offsets wrapped with % M are neither contiguous nor aligned where they wrap). "
            "Grading on the CPU (`--backend interpreter`) checks each promise and names the first value that "
            "breaks it.")


__all__ = ["HINTS", "MISALIGNED", "HintCall", "as_cpu_grade", "describe", "evidence", "false_hint_checks",
           "gpu_fault_note", "hint_calls", "names_false_hint", "with_cpu_evidence"]
