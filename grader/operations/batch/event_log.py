"""DIR/batch-log.jsonl: every run's events (start, graded, failed), for audit; and the timestamps it and
the batch records carry."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import IO, Any


class EventLog:
    """DIR/batch-log.jsonl: one JSON object per line, appended and flushed as things happen."""

    def __init__(self, path: Path, run: str) -> None:
        self.run = run
        self.file: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def write(self, event: str, **data: Any) -> None:
        self.file.write(json.dumps({"run": self.run, "event": event, "time": now(), **data}) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()

def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")

def iso(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.timezone.utc).isoformat(timespec="seconds")
