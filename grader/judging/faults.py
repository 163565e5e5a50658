"""GPU memory faults named for what they are: `oob-write` / `oob-read`, not a runtime error. Pure: no I/O.

A kernel that addresses memory outside every allocation stops on a GPU with `CUDA error: an illegal memory
access was encountered` (a `misaligned address` too, in code that makes no tl.multiple_of /
tl.max_contiguous promise: with promises that is `false-hint`, grader/judging/false_hints.py). The case's
worker loses its CUDA context, nothing of its outputs comes back, and torch's text ends with CUDA's advice to
set CUDA_LAUNCH_BLOCKING, which is no help to a student. The battery (grader/running/cases/battery.py) gathers
evidence for such a case, best first, and these functions turn it into the case's verdict:

1. the case run again alone under compute-sanitizer memcheck (grader/running/cases/sanitizer.py), where the tool
   is installed: the access, the buffer it missed and the kernel's line (`from_sanitizer`);
2. the same case, same inputs, in Triton's interpreter on the grading machine's CPU
   (grader/running/cases/cpu_companion.py): its guard bands and fence name the stray access and its line
   (`from_cpu_rerun`);
3. after the run, the submission's other cases of the same target (for a wrapper, also its problem's
   kernel cases) that ran to the end and showed out-of-bounds accesses in their guard bands
   (`name_from_other_cases`, grade-wide, in grader/operations/grade.py);
4. none of these: `memory-fault`, the fault's own words without CUDA's advice.

Each step is deterministic for a file and a seed (the same inputs, the same reruns, the same order), so the
verdict is too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grader import trap_ids
from grader.authoring.spec import Assignment
from grader.evidence.observation import Finding, Observation
from grader.judging.false_hints import MISALIGNED, HintCall
from grader.judging.judge import failure_head
from grader.results import CaseResult

ILLEGAL_ACCESS = "illegal memory access"
# The failures a GPU fault arrives as: the worker's reply (an exception from the launch or the synchronise
# after it) or the worker's death (an abort while CUDA tears the context down).
FAULT_FAILURES = frozenset({trap_ids.RUNTIME_ERROR, trap_ids.CRASH})
MEMORY_TRAPS = (trap_ids.OOB_WRITE, trap_ids.OOB_READ)
# Lines of torch's and Triton's CUDA error texts that advise the developer of torch, not the student.
_ADVICE = ("CUDA_LAUNCH_BLOCKING", "TORCH_USE_CUDA_DSA", "might be asynchronously reported",
           "Search for `cuda", "for more information.")

SANITIZER = "compute-sanitizer"
CPU_RERUN = "cpu-rerun"
OTHER_CASES = "other-cases"


@dataclass(frozen=True)
class Fault:
    """A case that ended in a GPU memory fault."""

    sign: str  # ILLEGAL_ACCESS or MISALIGNED: what the GPU said
    message: str  # the case's failure message, CUDA's debugging advice removed

    @property
    def what(self) -> str:
        return "an illegal memory access" if self.sign == ILLEGAL_ACCESS else "a misaligned address"


@dataclass(frozen=True)
class Naming:
    """What named a fault: the memory traps found, each with its sentence, and by which evidence."""

    findings: tuple[Finding, ...]
    by: str  # SANITIZER or CPU_RERUN


def without_cuda_advice(text: str) -> str:
    """`text` without the lines of CUDA's and torch's debugging advice (CUDA_LAUNCH_BLOCKING and the like)."""
    kept = [line for line in text.splitlines() if not any(sign in line for sign in _ADVICE)]
    return "\n".join(kept).strip()


def gpu_fault(failure: str | None, message: str, calls: Sequence[HintCall] = ()) -> Fault | None:
    """The case ended in an illegal address, or a misaligned one in code that makes no hints (with hints the
    battery names that `false-hint` already): the fault, else None."""
    if failure not in FAULT_FAILURES:
        return None
    if ILLEGAL_ACCESS in message:
        return Fault(ILLEGAL_ACCESS, without_cuda_advice(message))
    if MISALIGNED in message and not calls:
        return Fault(MISALIGNED, without_cuda_advice(message))
    return None


def from_sanitizer(findings: Sequence[Finding]) -> Naming | None:
    """memcheck's findings for the case run alone under it (grader.running.cases.sanitizer.memcheck_findings)."""
    found = tuple(f for f in findings if f.trap in MEMORY_TRAPS)
    return Naming(found, SANITIZER) if found else None


def from_cpu_rerun(result: CaseResult) -> Naming | None:
    """The same case graded in Triton's interpreter: its memory traps (the fence's stray load or store, the
    guard bands' findings), with the rerun's own message as the sentence. None where it found none: the
    interpreter then saw no access outside the tensors, and names nothing the GPU did."""
    traps = [t for t in result.traps if t in MEMORY_TRAPS]
    if not traps:
        return None
    text = result.message.strip()
    return Naming(tuple(Finding(t, text if i == 0 else "") for i, t in enumerate(traps)), CPU_RERUN)


def fault_observation(observation: Observation, fault: Fault, naming: Naming | None) -> Observation:
    """The faulted case's observation with its verdict: the named memory traps, else `memory-fault` (which the
    grade may still name from the submission's other cases: name_from_other_cases)."""
    if naming is None:
        message = (f"The kernel stopped on the GPU with {fault.what}: a load or store addressed memory outside every "
                   f"allocation{' or off its alignment' if fault.sign == MISALIGNED else ''}, and the GPU ended the "
                   "kernel. Neither compute-sanitizer (where it is installed) nor this case run again on the CPU "
                   "could say which access it was. Check every tl.load and tl.store mask against the tensor's bounds, "
                   "and the "
                   "strides each offset is multiplied by; grading on the CPU (`--backend interpreter`) stops the "
                   f"first stray access and names its line.\nWhat the GPU reported: {fault.message}")
        return dataclasses.replace(observation, trap=trap_ids.MEMORY_FAULT, message=message, fault_findings=(),
                                   fault=_evidence(fault, None))
    if naming.by == SANITIZER:
        how = "compute-sanitizer memcheck, running this case again alone, reports"
    else:
        how = ("the same case on the CPU (Triton's interpreter, the same inputs, every access checked against the "
               "tensors) shows it")
    where = "outside every allocation" + (" or off its alignment" if fault.sign == MISALIGNED else "")
    head = f"The kernel stopped on the GPU with {fault.what} (the GPU ends a kernel whose access lands {where}); {how}:"
    lines = [head, *(f"  {f.message}" for f in naming.findings if f.message), f"What the GPU reported: {fault.message}"]
    first, *rest = naming.findings
    return dataclasses.replace(observation, trap=first.trap, message="\n".join(lines), fault_findings=tuple(rest),
                               fault=_evidence(fault, naming.by))


def _evidence(fault: Fault, by: str | None) -> dict[str, Any]:
    return {"sign": fault.sign, "named_by": by, "message": fault.message[:2000]}


# --------------------------------------------------------------------------- wrong values nothing named

# What a GPU case's wrong values are called when no trap explains them: the same case on the CPU may
UNEXPLAINED = frozenset({trap_ids.UNKNOWN, trap_ids.NONDETERMINISTIC})


def unexplained(result: CaseResult) -> bool:
    """A failed case named only `unknown` / `nondeterministic`: wrong values with no cause found."""
    return not result.passed and bool(result.traps) and set(result.traps) <= UNEXPLAINED


def name_unexplained(result: CaseResult, rerun: CaseResult | None, catalog: Mapping[str, Any]) -> CaseResult:
    """The GPU verdict is the CPU verdict: a GPU case whose wrong values nothing named takes the out-of-bounds traps
    the same case (same inputs) shows in Triton's interpreter, whose fence stops every access outside the launch's
    tensors. A wild load that lands inside another allocation returns some other buffer's bytes on the GPU: the
    guard bands never see it and memcheck reports nothing, so the values are only `unknown` there. Without such
    a trap on the CPU the case keeps its own names."""
    if not unexplained(result) or rerun is None:
        return result
    naming = from_cpu_rerun(rerun)
    if naming is None:
        return result
    traps = tuple(dict.fromkeys(f.trap for f in naming.findings))
    _, _, gpu_lines = result.message.partition("\n")
    message = "\n".join([failure_head(traps, catalog),
                         "The same case on the CPU (Triton's interpreter, the same inputs, every access checked "
                         "against the tensors) names what the GPU's wrong values could not:",
                         *(f"  {f.message}" for f in naming.findings if f.message),
                         "On the GPU: " + (gpu_lines or result.message)])
    evidence = dict(result.evidence)
    evidence["named_on_cpu"] = {"gpu_traps": list(result.traps), "by": CPU_RERUN}
    return dataclasses.replace(result, traps=traps, message=message, evidence=evidence)


# --------------------------------------------------------------------------- grade-wide: the other cases


def name_from_other_cases(cases: Sequence[CaseResult], assignment: Assignment) -> list[CaseResult]:
    """A `memory-fault` case takes the out-of-bounds traps of the submission's other cases of the same target
    that ran to the end (their guard bands or reruns found them); a wrapper's, failing those, of the kernel
    cases of its problem (it launches one of them). The traps replace `memory-fault`; the message says which
    cases they come from. Cases with nothing to inherit keep `memory-fault`."""
    out = []
    for case in cases:
        if trap_ids.MEMORY_FAULT not in case.traps:
            out.append(case)
            continue
        found, sources = _memory_traps_of([c for c in cases if c.target == case.target], case)
        if not found and case.target in assignment.functions:
            problem = assignment.functions[case.target].problem
            found, sources = _memory_traps_of([c for c in cases if c.target in assignment.kernels
                                               and assignment.kernels[c.target].problem == problem], case)
        if not found:
            out.append(case)
            continue
        traps = tuple(dict.fromkeys(t for t in (*found, *case.traps) if t != trap_ids.MEMORY_FAULT))
        evidence = dict(case.evidence)
        if isinstance(evidence.get("gpu_fault"), Mapping):
            evidence["gpu_fault"] = {**evidence["gpu_fault"], "named_by": OTHER_CASES, "cases": sources}
        note = (f"Named from this submission's other cases, which ran to the end: {', '.join(sources)} "
                f"show{'s' if len(sources) == 1 else ''} {', '.join(found)} (the guard bands around their tensors), "
                f"the likely cause of this fault too.")
        out.append(dataclasses.replace(case, traps=traps, message=f"{note}\n{case.message}", evidence=evidence))
    return out


def _memory_traps_of(pool: Sequence[CaseResult], case: CaseResult) -> tuple[tuple[str, ...], list[str]]:
    """The out-of-bounds traps the other cases of `pool` show (in MEMORY_TRAPS order), and those cases' ids."""
    found: set[str] = set()
    sources = []
    for other in pool:
        shown = {t for t in other.traps if t in MEMORY_TRAPS}
        if other is case or not shown:
            continue
        found |= shown
        sources.append(other.case_id)
    return tuple(t for t in MEMORY_TRAPS if t in found), sources


__all__ = ["CPU_RERUN", "ILLEGAL_ACCESS", "MEMORY_TRAPS", "OTHER_CASES", "SANITIZER", "UNEXPLAINED", "Fault",
           "Naming", "fault_observation", "from_cpu_rerun", "from_sanitizer", "gpu_fault", "name_from_other_cases",
           "name_unexplained", "unexplained", "without_cuda_advice"]
