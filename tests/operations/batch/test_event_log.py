"""grader/operations/batch/event_log.py: batch-log.jsonl, one JSON object per line, appended and flushed."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from grader.operations.batch.event_log import EventLog, iso, now


def test_events_are_appended_lines(tmp_path: Path) -> None:
    path = tmp_path / "batch-log.jsonl"
    log = EventLog(path, "run1")
    log.write("start", student="ann")
    assert json.loads(path.read_text(encoding="utf-8"))["student"] == "ann"  # flushed at once
    log.close()
    again = EventLog(path, "run2")
    again.write("graded", student="ann", seconds=1.5)
    again.close()
    events = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [(e["run"], e["event"]) for e in events] == [("run1", "start"), ("run2", "graded")]
    assert dt.datetime.fromisoformat(events[0]["time"]).tzinfo is not None


def test_timestamps() -> None:
    assert iso(0) == "1970-01-01T00:00:00+00:00"
    assert dt.datetime.fromisoformat(now()).tzinfo == dt.timezone.utc
