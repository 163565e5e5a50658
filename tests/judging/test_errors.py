"""grader/judging/errors.py: the sentences and trap ids for an exception the submission raised (a stray access
the fence stopped, a compile error, the rest)."""

from __future__ import annotations

from grader import trap_ids
from grader.evidence.worker_error import Frame, WorkerError
from grader.judging.errors import classify_error, error_message, failure_message

FRAME = Frame(line=12, function="softmax", code="  y = x / 0  ")


def test_error_message_names_type_line_and_cause() -> None:
    assert error_message(WorkerError(type="ValueError", message=" bad "), "s.py") == "ValueError: bad"
    assert error_message(WorkerError(type="KeyError", frames=(FRAME,)), "s.py") == \
        "KeyError (s.py, line 12, in softmax: y = x / 0)"
    chained = WorkerError(type="RuntimeError", message="outer", root_type="IndexError", root_message="inner")
    assert error_message(chained, "s.py") == "RuntimeError: outer\ncaused by IndexError: inner"


def test_classify_error() -> None:
    assert classify_error(WorkerError(chain=("grader.running.worker.fence.StrayWrite",))) == trap_ids.OOB_WRITE
    assert classify_error(WorkerError(chain=("grader.running.worker.fence.StrayRead",))) == trap_ids.OOB_READ
    assert classify_error(WorkerError(chain=("triton.compiler.errors.CompilationError",))) == trap_ids.COMPILE_ERROR
    assert classify_error(WorkerError(type="RuntimeError", interpreter_limit=True)) == trap_ids.INTERPRETER_UNSUPPORTED
    assert classify_error(WorkerError(chain=("torch.OutOfMemoryError",))) == trap_ids.OUT_OF_MEMORY
    assert classify_error(WorkerError(type="ZeroDivisionError")) == trap_ids.RUNTIME_ERROR


def test_failure_message_for_a_stopped_access() -> None:
    stray = WorkerError(chain=("grader.running.worker.fence.StrayWrite",), root_message="store 3 elements past out",
                        frames=(FRAME,))
    assert failure_message(stray, "softmax_kernel", "s.py") == (
        "softmax_kernel was stopped at an out-of-bounds store (s.py, line 12, in softmax: y = x / 0): "
        "store 3 elements past out")
    raised = WorkerError(type="ValueError", message="m")
    assert failure_message(raised, "softmax", "s.py") == "softmax raised ValueError: m"
