"""Putting one student's outputs in place as a whole: written into scratch space, fsynced, then the folder
renamed into DIR, so `DIR/<student>/results.json` exists exactly when that student's grade is complete."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grader.operations.batch.folder import ERROR, RECORD, SCRATCH
from grader.operations.executors import JobOutcome


def commit(out: Path, outcome: JobOutcome, record: Mapping[str, Any]) -> Path:
    """Put one student's outputs in place as a whole: written into scratch, then the folder renamed."""
    scratch = out / SCRATCH
    staging = scratch / f"commit.{outcome.student}.{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    files = dict(outcome.files)
    if outcome.ok:
        files[RECORD] = json_bytes(record)
    else:
        files[ERROR] = json_bytes({**record, "error": outcome.error})
    for name, data in files.items():
        if "/" in name or name.startswith("."):
            continue
        with open(staging / name, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    final = out / outcome.student
    aside = None
    if final.exists():
        aside = scratch / f"replaced.{outcome.student}.{uuid.uuid4().hex[:8]}"
        os.replace(final, aside)
    os.replace(staging, final)
    fsync_dir(out)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
    return final

def json_bytes(data: Any) -> bytes:
    return (json.dumps(data, indent=2, allow_nan=False) + "\n").encode("utf-8")

def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
