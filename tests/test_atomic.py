"""grader/atomic.py: files written whole or not at all (a temporary file, then os.replace),
readable by others, over whatever squats on the name; zips deterministic, with their permission bits."""

from __future__ import annotations

import json
import math
import stat
import zipfile
from pathlib import Path

import pytest

from grader.atomic import ZIP_DATE, write_json, write_text, write_zip


def test_text_and_json(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "results.json"
    write_json(path, {"score": 1.5, "tests": []})
    assert json.loads(path.read_text(encoding="utf-8")) == {"score": 1.5, "tests": []}
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    with pytest.raises(ValueError):  # NaN is not JSON (Gradescope rejects it): nothing is written
        write_json(path, {"score": math.nan})
    assert json.loads(path.read_text(encoding="utf-8"))["score"] == 1.5
    assert [p.name for p in path.parent.iterdir()] == ["results.json"]  # no temporary file left behind


def test_replaces_a_directory_or_link_planted_on_the_name(tmp_path: Path) -> None:
    planted = tmp_path / "report.md"
    (planted / "inside").mkdir(parents=True)
    write_text(planted, "# report\n")
    assert planted.is_file() and planted.read_text(encoding="utf-8") == "# report\n"
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep", encoding="utf-8")
    link = tmp_path / "grade.json"
    link.symlink_to(target)
    write_text(link, "{}")
    assert not link.is_symlink() and target.read_text(encoding="utf-8") == "keep"


def test_zip_is_deterministic_with_permissions(tmp_path: Path) -> None:
    files = {"b/run": (b"#!/bin/sh\n", 0o755), "a.txt": (b"text", 0o644)}
    first = write_zip(tmp_path / "one.zip", files)
    second = write_zip(tmp_path / "two.zip", dict(reversed(list(files.items()))))
    assert first.read_bytes() == second.read_bytes()
    with zipfile.ZipFile(first) as zf:
        infos = zf.infolist()
        assert [i.filename for i in infos] == ["a.txt", "b/run"]
        assert all(i.date_time == ZIP_DATE for i in infos)
        assert {i.filename: (i.external_attr >> 16) & 0o777 for i in infos} == {"a.txt": 0o644, "b/run": 0o755}
        assert zf.read("b/run") == b"#!/bin/sh\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.zip", "two.zip"]
