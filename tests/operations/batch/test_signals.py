"""grader/operations/batch/signals.py: a signal raises only where the batch allows it, after a held block,
and only once; the test hook names its signal and point. (A real batch interrupted at each point is in
tests/e2e/test_batch_grading.py.)"""

from __future__ import annotations

import os
import signal

import pytest

from grader.operations.batch.signals import Interrupts, catching_interrupts, interrupt_signal


def test_raises_only_inside_allowed_and_after_held() -> None:
    interrupts = Interrupts()
    interrupts.on_signal(signal.SIGINT, None)  # outside allowed(): recorded only
    assert interrupts.received
    with pytest.raises(KeyboardInterrupt), interrupts.allowed():  # raised on entry
        pass
    again = Interrupts()
    with pytest.raises(KeyboardInterrupt), again.allowed():
        with again.held():
            again.on_signal(signal.SIGTERM, None)  # waits for the end of the held block
            done = True
    assert done
    with again.allowed():  # only the first signal raises
        again.on_signal(signal.SIGINT, None)


def test_handlers_are_set_and_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), catching_interrupts() as interrupts, interrupts.allowed():
        os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) == before


def test_interrupt_points() -> None:
    assert interrupt_signal("graded:1", "graded:1") == signal.SIGINT
    assert interrupt_signal("commit:2/SIGKILL", "commit:2") == signal.SIGKILL
    assert interrupt_signal("graded:1", "graded:2") is None and interrupt_signal("", "gradebook") is None
