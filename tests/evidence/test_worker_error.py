"""grader/evidence/worker_error.py: an exception as the worker described it is a frozen value, compared by value,
with defaults that say nothing (what a reply without an error reads as)."""

from __future__ import annotations

import dataclasses

import pytest

from grader.evidence.worker_error import Frame, WorkerError


def test_a_worker_error_is_a_frozen_value() -> None:
    error = WorkerError(type="ValueError", message="bad", frames=(Frame(3, "softmax", "x = y"),))
    assert error == WorkerError(type="ValueError", message="bad", frames=(Frame(3, "softmax", "x = y"),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        error.message = "changed"  # type: ignore[misc]
    empty = WorkerError()
    assert (empty.type, empty.message, empty.chain, empty.frames, empty.interpreter_limit) == ("Error", "", (), (),
                                                                                               False)
