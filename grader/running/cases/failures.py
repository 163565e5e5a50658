"""A request that did not come back, in the student's words: a timeout, a crash, a replay that failed. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from grader import trap_ids
from grader.evidence.observation import Finding, Observation
from grader.judging import faults
from grader.judging.errors import classify_error, error_message, failure_message
from grader.judging.false_hints import HintCall, gpu_fault_note, names_false_hint
from grader.running import protocol
from grader.running.processes.client import ImportFailure, WorkerFailure

# Why an import never returns, for a student who may not know that importing a file runs it.
MODULE_LEVEL_CODE = ("code at module level (outside any function) runs when the file is imported, and something "
                     "there does not end: a loop like `while True:`, a long computation, a wait for input. The grader "
                     "stopped it; no case could run")


def failure_sentence(what: str, failure: WorkerFailure) -> str:
    """A failed request in one plain sentence: a timeout says what did not finish within how long ("Did not finish
    within 15 s (layernorm(...)): the grader stopped it."); a crash says that `what` crashed the worker, and how."""
    if failure.trap == trap_ids.TIMEOUT:
        detail = failure.detail if failure.detail.endswith(")") else f"{failure.detail} ({what})"
        return f"{detail[:1].upper()}{detail[1:]}: the grader stopped it."
    return f"{what} crashed the worker: {failure.detail}."


def import_failure_sentence(filename: str, failure: WorkerFailure) -> str:
    """Importing the submission timed out or crashed its worker, in one sentence that names the file once: a
    timeout says what runs at import ("Importing loop.py did not finish within 60 s: code at module level ...")."""
    if failure.trap == trap_ids.TIMEOUT and isinstance(failure, ImportFailure):
        return f"Importing {filename} did not finish within {failure.limit_s:g} s: {MODULE_LEVEL_CODE}."
    detail = failure.detail.replace(f" while importing {filename}", "").replace(f" (importing {filename})", "")
    verb = "timed out" if failure.trap == trap_ids.TIMEOUT else "crashed"
    return f"Importing {filename} {verb}: {detail}."


def tail(text: str) -> str:
    """The submission's last output, as a paragraph of a message ('' when it printed nothing)."""
    text = text.strip()
    if not text:
        return ""
    return "\nLast output of the submission:\n" + text[-1500:]


def failed_request(what: str, failure: WorkerFailure, calls: Sequence[HintCall], submission_name: str) -> Observation:
    """A case's request that timed out or crashed its worker; a GPU fault that a false tl.multiple_of /
    tl.max_contiguous promise explains is `false-hint`."""
    text = failure_sentence(what, failure) + tail(failure.output_tail)
    kind = failure.trap
    if kind == trap_ids.CRASH and names_false_hint(f"{failure.detail} {failure.output_tail}", calls):
        kind = trap_ids.FALSE_HINT
        text += "\n" + gpu_fault_note(calls, submission_name)
    return Observation(trap=kind, message=text, output_tail=failure.output_tail)


def replay_failure(target: str, failure: WorkerFailure | None = None, reply: protocol.Replayed | None = None,
                   submission: str = "", calls: Sequence[HintCall] = ()) -> Finding:
    """Name what went wrong when replaying a wrapper's recorded launches: the student's kernel crashing,
    timing out, running out of bounds or raising is that trap; a GPU memory fault is `memory-fault` (which the
    grade names from the other cases, grader/judging/faults.py); only a record the replay worker could not
    even decode (or a malformed reply) is `tampering`. `calls`: the submission's hints (a misaligned address
    in code that makes some is `false-hint`)."""
    finding = _replay_failure(target, failure, reply, submission, calls)
    fault = faults.gpu_fault(finding.trap, finding.message, calls)
    if fault is None:
        return finding
    return Finding(trap_ids.MEMORY_FAULT, f"Replaying the recorded launches of {target} in a fresh worker, the "
                   f"kernel stopped on the GPU with {fault.what}: a load or store outside every allocation. What the "
                   f"GPU reported: {fault.message}")


def _replay_failure(target: str, failure: WorkerFailure | None, reply: protocol.Replayed | None,
                    submission: str, calls: Sequence[HintCall]) -> Finding:
    head = f"replaying the recorded launches of {target} in a fresh worker"
    if failure is not None:
        return Finding(failure.trap, failure_sentence(head, failure) + tail(failure.output_tail))
    if reply is None or reply.ok or reply.error is None:
        return Finding("tampering", f"{head} gave a malformed reply")
    if reply.stage == "record":
        return Finding("tampering", f"{head} failed: the launch record could not be decoded "
                       f"({error_message(reply.error, submission)}): the worker's account of what the wrapper ran "
                       "was altered")
    return Finding(classify_error(reply.error, calls), failure_message(reply.error, head, submission))
