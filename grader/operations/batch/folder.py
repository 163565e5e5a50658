"""The batch's output folder DIR: the names of its files, reading its JSON, one batch at a time in it
(`locked`), and the error for the batch's inputs and its folder."""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BATCH_FORMAT_VERSION = 1

MANIFEST = "batch.json"

EVENT_LOG = "batch-log.jsonl"

RECORD = "batch-record.json"

ERROR = "error.json"

SCRATCH = ".scratch"

LOCK = ".batch.lock"

RESERVED = {MANIFEST, EVENT_LOG, "gradebook.json", "gradebook.csv", "canvas.csv", "class_report.html",
            "similarity.csv", "similarity.html"}


class BatchError(Exception):
    """A problem with the batch's inputs or output folder; the message is for the instructor."""


@contextlib.contextmanager
def locked(out: Path) -> Iterator[None]:
    """One batch at a time per output folder (the lock dies with the process, even on SIGKILL)."""
    out.mkdir(parents=True, exist_ok=True)
    handle = open(out / LOCK, "a+")  # noqa: SIM115 - held for the whole run
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BatchError(f"another `grader batch` is writing to {out}; wait for it or stop it") from None
        yield
    finally:
        handle.close()

def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
