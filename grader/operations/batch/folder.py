"""The batch's output folder DIR: the names of its files, reading its JSON, one batch at a time in it
(`locked`), and the error for the batch's inputs and its folder."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

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
    """One batch at a time per output folder, and nothing of the lock left behind.

    The lock is an flock on DIR/.batch.lock (it dies with the process, even on SIGKILL); the holder removes
    the file before it lets go, so a batch that opened the old file in the meantime finds it no longer at
    that path, and tries again on a new one. A folder this call made (DIR, and any parents) is removed
    again when it is empty on the way out: a batch refused at its start leaves nothing."""
    made = _missing_folders(out)
    path = out / LOCK
    try:
        handle = _lock(path, out)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
            handle.close()
    finally:
        for folder in made:  # deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty


def _missing_folders(out: Path) -> list[Path]:
    """`out` and those of its parents that do not exist yet, deepest first."""
    missing = []
    for folder in (out, *out.parents):
        if folder.exists():
            break
        missing.append(folder)
    return missing


def _lock(path: Path, out: Path) -> IO[str]:
    while True:
        out.mkdir(parents=True, exist_ok=True)  # again: a batch that just finished may have removed it
        handle = open(path, "a+")  # noqa: SIM115 - held for the whole run
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise BatchError(f"another `grader batch` is writing to {out}; wait for it or stop it") from None
        try:
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        if current is not None and os.path.samestat(current, os.fstat(handle.fileno())):
            return handle
        handle.close()  # the holder removed this file as it finished: lock the one at the path now

def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
