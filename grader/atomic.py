"""Atomic file writes: a temporary file in the same folder, then os.replace. Text, JSON and zips (the
Gradescope bundle and the student bundle are written by `write_zip`)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are meant to be read by the LMS and people
        if path.is_symlink() or (path.exists() and not path.is_file()):
            # something else squats on the name (a directory or link planted there): replace it
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, allow_nan=False) + "\n")


ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed: the same files give the same zip, byte for byte


def write_zip(path: Path, files: Mapping[str, tuple[bytes, int]]) -> Path:
    """Write `name -> (bytes, permission bits)` as a zip at `path`, deterministically (sorted names, fixed
    dates, Unix permissions) via a temporary file and os.replace; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for name in sorted(files):
                data, mode = files[name]
                info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
                info.external_attr = (0o100000 | mode) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                info.create_system = 3  # Unix, so the permission bits are honoured
                zf.writestr(info, data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
