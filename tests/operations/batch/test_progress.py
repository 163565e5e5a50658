"""grader/operations/batch/progress.py: one plain line per submission off a terminal; a bar with an ETA
redrawn in place on one; failures always on a line of their own."""

from __future__ import annotations

import io

from grader.operations.batch.progress import Progress, duration


def test_plain_lines_off_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress(stream, 12)
    assert not progress.interactive and progress.eta_s() is None
    progress.line("grading 12")
    progress.advance("ann: 3 / 4")
    progress.advance("ben: GRADING FAILED", failed=True)
    progress.close()
    assert stream.getvalue().splitlines() == ["grading 12", "[ 1/12] ann: 3 / 4", "[ 2/12] ben: GRADING FAILED"]
    assert (progress.done, progress.failed) == (2, 1) and progress.eta_s() is not None


def test_a_bar_on_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress(stream, 2, interactive=True)
    progress.advance("ann")
    progress.advance("ben failed", failed=True)
    progress.close()
    text = stream.getvalue()
    assert "\r\x1b[2K[" in text and "2/2" in text and "1 failed" in text and "ben failed\n" in text
    assert "ann" not in text  # a success only moves the bar


def test_duration() -> None:
    assert [duration(s) for s in (5, 65, 3725)] == ["5s", "1m05s", "1h02m"]
