"""An exception raised by code in a worker, as the worker described it: its type, message and chain, and the
submission's own frames (never the grader's). grader.judging.errors names its trap and writes its sentence."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Frame:
    """One frame of the submission's own code: its line, function and source line."""

    line: int = 0
    function: str = ""
    code: str = ""


@dataclass(frozen=True)
class WorkerError:
    """`chain`: the qualified names of the exception and its causes, outermost first; `root_*`: the innermost
    cause; `interpreter_limit`: the worker found the cause in a limit of Triton's CPU interpreter
    (grader.running.worker.interpreter_compat), not in the student's code."""

    type: str = "Error"
    message: str = ""
    qualname: str = ""
    root_type: str = ""
    root_message: str = ""
    chain: tuple[str, ...] = ()
    frames: tuple[Frame, ...] = ()
    interpreter_limit: bool = False
