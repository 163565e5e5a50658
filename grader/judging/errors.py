"""An exception the worker reported, in the student's words: which trap it is, and the sentence that says it."""

from __future__ import annotations

from collections.abc import Sequence

from grader import trap_ids
from grader.evidence.worker_error import WorkerError
from grader.judging.false_hints import HintCall, names_false_hint


def error_message(error: WorkerError | None, submission_name: str) -> str:
    """A student-facing sentence for an exception raised by submission code: type, message, line."""
    error = error or WorkerError()
    kind = error.type
    message = error.message.strip()
    root = error.root_type
    if root and root != kind:
        root_message = error.root_message.strip()
        message = f"{message}\ncaused by {root}: {root_message}" if message else f"{root}: {root_message}"
    where = _where(error, submission_name)
    return f"{kind}{where}: {message}" if message else f"{kind}{where}"


def _where(error: WorkerError, submission_name: str) -> str:
    if not error.frames:
        return ""
    last = error.frames[-1]
    return f" ({submission_name}, line {last.line}, in {last.function}: {last.code.strip()})"


def failure_message(error: WorkerError | None, what: str, submission_name: str) -> str:
    """`what raised <error>`; for an access the fence stopped, what it stopped and where, in one sentence."""
    error = error or WorkerError()
    trap = classify_error(error)
    if trap in ("oob-write", "oob-read"):
        access = "store" if trap == "oob-write" else "load"
        return (f"{what} was stopped at an out-of-bounds {access}{_where(error, submission_name)}: "
                f"{error.root_message.strip()}")
    return f"{what} raised " + error_message(error, submission_name)


# Raised by the interpreter worker's fence (grader/running/worker/fence.py) when a kernel addresses
# memory outside every tensor of its launch.
STRAY_ACCESS_TRAPS = {
    "grader.running.worker.fence.StrayWrite": "oob-write",
    "grader.running.worker.fence.StrayRead": "oob-read",
}


def classify_error(error: WorkerError | None, hint_calls: Sequence[HintCall] = ()) -> str:
    """oob-write / oob-read when the worker's fence stopped a stray access; compile-error for Triton
    compilation problems; false-hint for a GPU `misaligned address` in a submission that makes
    tl.multiple_of / tl.max_contiguous promises (`hint_calls`, from its source); interpreter-unsupported
    where the worker found the cause in a limit of Triton's CPU interpreter (`interpreter_limit`, see
    grader/running/worker/interpreter_compat.py; grading takes the name back where the kernel fails the
    GPU compile too); runtime-error for the rest."""
    error = error or WorkerError()
    for link in error.chain:
        if link in STRAY_ACCESS_TRAPS:
            return STRAY_ACCESS_TRAPS[link]
    chain = " ".join(error.chain) + " " + error.type
    if "CompilationError" in chain or "UnsupportedLanguageConstruct" in chain or "CompileTimeAssertion" in chain:
        return trap_ids.COMPILE_ERROR
    if names_false_hint(f"{error.message} {error.root_message}", hint_calls):
        return trap_ids.FALSE_HINT
    if error.interpreter_limit:
        return trap_ids.INTERPRETER_UNSUPPORTED
    if "OutOfMemoryError" in chain:
        return trap_ids.OUT_OF_MEMORY
    return trap_ids.RUNTIME_ERROR
