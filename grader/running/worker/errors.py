"""Inside the worker: an exception described for the grader (grader.evidence.worker_error), and whether it left
the device unusable."""

from __future__ import annotations

import traceback
from pathlib import Path

from grader.evidence.worker_error import Frame, WorkerError
from grader.running.worker import interpreter_compat


def describe_exception(exc: BaseException, submission: str) -> WorkerError:
    """Type, message and the submission's own frames (never the grader's) of an exception chain."""
    chain = []
    seen = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or current.__context__
    frames = []
    for link in chain:
        for frame in traceback.extract_tb(link.__traceback__):
            if Path(frame.filename).resolve() == Path(submission).resolve():
                frames.append(Frame(frame.lineno or 0, frame.name, frame.line or ""))
    if isinstance(exc, SyntaxError):
        frames = [Frame(exc.lineno or 0, "<module>", (exc.text or "").rstrip())]
    root = chain[-1]
    return WorkerError(
        type=type(exc).__name__,
        qualname=f"{type(exc).__module__}.{type(exc).__qualname__}",
        message=_safe_str(exc),
        root_type=type(root).__name__,
        root_message=_safe_str(root),
        chain=tuple(f"{type(e).__module__}.{type(e).__qualname__}" for e in chain),
        frames=tuple(frames),
        interpreter_limit=interpreter_compat.is_interpreter_limit(exc),
    )


def _safe_str(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # a hostile __str__
        text = "<unprintable exception>"
    return text[:4000]


def is_fatal_device_error(exc: BaseException) -> bool:
    """A CUDA error that leaves the context unusable: the worker must be replaced."""
    text = f"{type(exc).__name__} {_safe_str(exc)}"
    return any(sign in text for sign in ("illegal memory access", "misaligned address", "CUDA error",
                                         "AcceleratorError"))
