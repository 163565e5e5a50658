"""Ctrl-C and SIGTERM during a batch: every moment safe to interrupt (`Interrupts`), and the points a test
can have the batch interrupt itself at (GRADER_BATCH_INTERRUPT_AT)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

INTERRUPT_AT = "GRADER_BATCH_INTERRUPT_AT"  # for tests only: see interrupt_signal

class Interrupts:
    """Ctrl-C (SIGINT) and SIGTERM while a batch runs, so that every moment is safe to interrupt.

    A signal is always recorded (`received`). It raises KeyboardInterrupt only inside `allowed()` (the
    grading loop, whose children are ended on the way out), and there not inside `held()` (one student's
    commit and its log line) but as that block ends. Anywhere else (discovery, the gradebook and class
    report, cleanup: all short) the run finishes what it does and then reports itself interrupted. Only
    the first signal raises: a second Ctrl-C cannot cut the way out short.

    Python runs signal handlers in the main thread whichever thread the kernel picked, so this holds with
    other threads around (Ray's), where a blocked signal mask would not.
    """

    def __init__(self) -> None:
        self.received = False
        self._raising = False  # inside allowed() and not inside held()
        self._raised = False

    def on_signal(self, _signum: int, _frame: Any) -> None:
        self.received = True
        self._honour()

    def _honour(self) -> None:
        if self.received and self._raising and not self._raised:
            self._raised = True
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def allowed(self) -> Iterator[None]:
        """A signal raises KeyboardInterrupt in here: at once, or on entry for one received before."""
        self._raising = True
        try:
            self._honour()
            yield
        finally:
            self._raising = False

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A signal waits for the end of this block (and raises there if allowed)."""
        raising, self._raising = self._raising, False
        try:
            yield
        finally:
            self._raising = raising
        self._honour()

@contextlib.contextmanager
def catching_interrupts() -> Iterator[Interrupts]:
    """SIGINT and SIGTERM handled by an `Interrupts` for the duration (handlers can only be set from the
    main thread; elsewhere no KeyboardInterrupt arrives anyway)."""
    interrupts = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield interrupts
        return
    previous = {sig: signal.signal(sig, interrupts.on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield interrupts
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

def interrupt_signal(setting: str, point: str) -> signal.Signals | None:
    """The signal that GRADER_BATCH_INTERRUPT_AT=`setting` has the batch send itself at `point`, if any.

    For tests, which stop a batch at a chosen point instead of on a race: `graded:1` is SIGINT right
    after the first result of the run is committed and logged; `commit:2` is SIGINT between putting the
    second result in place and logging it; `gradebook` is SIGINT after the last grade, as the gradebook
    is written; `commit:2/SIGKILL` sends SIGKILL instead.
    """
    where, _, name = setting.partition("/")
    return signal.Signals[name or "SIGINT"] if where == point else None

def interrupt_point(point: str) -> None:
    sig = interrupt_signal(os.environ.get(INTERRUPT_AT, ""), point)
    if sig is not None:
        os.kill(os.getpid(), sig)  # handled before os.kill returns
