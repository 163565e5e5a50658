"""What the grader observed of one case: raw facts, before any judgement."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from grader import trap_ids
from grader.judging.false_hints import HintCall, names_false_hint
from grader.running.guards import GuardFinding


@dataclass(frozen=True)
class Finding:
    """A trap some check named, with the sentence that explains it to the student."""

    trap: str
    message: str


@dataclass(frozen=True)
class Observation:
    trap: str | None = None  # the trap that ended the case early (crash, timeout, missing-symbol...)
    message: str = ""
    outputs: Mapping[str, torch.Tensor] = field(default_factory=dict)
    guard_findings: tuple[GuardFinding, ...] = ()
    unwritten: Mapping[str, torch.Tensor] = field(default_factory=dict)
    launches: tuple[Mapping[str, Any], ...] | None = None  # None: the grader launched the kernel itself
    torch_ops: Mapping[str, int] = field(default_factory=dict)
    output_tail: str = ""
    elapsed_s: float = 0.0
    block_meta: Mapping[str, int] = field(default_factory=dict)
    row_strides: Mapping[str, int] = field(default_factory=dict)  # input name -> row stride as placed
    # Output positions whose NaN turned finite when the input guards held a finite value: values read
    # from outside the input tensors (filled by the battery's probe run).
    guard_reads: Mapping[str, torch.Tensor] = field(default_factory=dict)
    # Outputs whose bits differed when the identical case was run a second time.
    nondeterministic: tuple[str, ...] = ()
    # Wrapper cases: the storages the grader sent, where each returned tensor lives in the worker, and
    # what replaying the recorded launches in a fresh worker found (grader/judging/replay.py).
    sent_storages: tuple[torch.Tensor, ...] = ()
    result_views: tuple[Any, ...] = ()
    replay_finding: Finding | None = None
    # Kernel cases run again under compute-sanitizer memcheck (`--sanitize`): what it reported.
    sanitizer_findings: tuple[Finding, ...] = ()
    # Interpreter: the first tl.multiple_of / tl.max_contiguous promise the values broke, as the worker
    # reported it (grader/running/worker/hint_check.py; checked in grader/judging/false_hints.py).
    false_hint: Mapping[str, Any] | None = None
    # A GPU memory fault (illegal or misaligned address) named by grader/judging/faults.py: the traps it was
    # named besides `failure`, each with its sentence, and plain data for the case's evidence (`gpu_fault`).
    fault_findings: tuple[Finding, ...] = ()
    fault: Mapping[str, Any] | None = None
    # Interpreter: each launch's loads and stores as counted lane by lane (grader/running/worker/traffic.py),
    # the evidence of the performance traps (grader/judging/performance_traps.py). None: not counted.
    traffic: tuple[Mapping[str, Any], ...] | None = None


def error_message(error: Mapping[str, Any], submission_name: str) -> str:
    """A student-facing sentence for an exception raised by submission code: type, message, line."""
    kind = error.get("type", "Error")
    message = str(error.get("message", "")).strip()
    root = error.get("root_type")
    if root and root != kind:
        root_message = str(error.get("root_message", "")).strip()
        message = f"{message}\ncaused by {root}: {root_message}" if message else f"{root}: {root_message}"
    where = _where(error, submission_name)
    return f"{kind}{where}: {message}" if message else f"{kind}{where}"


def _where(error: Mapping[str, Any], submission_name: str) -> str:
    frames = error.get("frames") or []
    if not frames:
        return ""
    last = frames[-1]
    code = str(last.get("code", "")).strip()
    return f" ({submission_name}, line {last.get('line')}, in {last.get('function')}: {code})"


def failure_message(error: Mapping[str, Any], what: str, submission_name: str) -> str:
    """`what raised <error>`; for an access the fence stopped, what it stopped and where, in one sentence."""
    trap = classify_error(error)
    if trap in ("oob-write", "oob-read"):
        access = "store" if trap == "oob-write" else "load"
        return (f"{what} was stopped at an out-of-bounds {access}{_where(error, submission_name)}: "
                f"{str(error.get('root_message', '')).strip()}")
    return f"{what} raised " + error_message(error, submission_name)


# Raised by the interpreter worker's fence (grader/running/worker/fence.py) when a kernel addresses
# memory outside every tensor of its launch.
STRAY_ACCESS_TRAPS = {
    "grader.running.worker.fence.StrayWrite": "oob-write",
    "grader.running.worker.fence.StrayRead": "oob-read",
}


def classify_error(error: Mapping[str, Any], hint_calls: Sequence[HintCall] = ()) -> str:
    """oob-write / oob-read when the worker's fence stopped a stray access; compile-error for Triton
    compilation problems; false-hint for a GPU `misaligned address` in a submission that makes
    tl.multiple_of / tl.max_contiguous promises (`hint_calls`, from its source); interpreter-unsupported
    where the worker found the cause in a limit of Triton's CPU interpreter (`interpreter_limit`, see
    grader/running/worker/interpreter_compat.py; grading takes the name back where the kernel fails the
    GPU compile too); runtime-error for the rest."""
    links = [str(link) for link in error.get("chain", ())]
    for link in links:
        if link in STRAY_ACCESS_TRAPS:
            return STRAY_ACCESS_TRAPS[link]
    chain = " ".join(links) + " " + str(error.get("type", ""))
    if "CompilationError" in chain or "UnsupportedLanguageConstruct" in chain or "CompileTimeAssertion" in chain:
        return trap_ids.COMPILE_ERROR
    if names_false_hint(f"{error.get('message', '')} {error.get('root_message', '')}", hint_calls):
        return trap_ids.FALSE_HINT
    if error.get("interpreter_limit") is True:
        return trap_ids.INTERPRETER_UNSUPPORTED
    if "OutOfMemoryError" in chain:
        return trap_ids.OUT_OF_MEMORY
    return trap_ids.RUNTIME_ERROR
