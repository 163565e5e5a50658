"""grader/operations/batch/folder.py: DIR's file names, reading its JSON leniently, one batch at a time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from grader.operations.batch.folder import LOCK, MANIFEST, RESERVED, BatchError, locked, read_json
from tests.conftest import ROOT


def test_read_json_is_lenient(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text('{"x": 1}', encoding="utf-8")
    (tmp_path / "b.json").write_text("[1, 2]", encoding="utf-8")
    (tmp_path / "c.json").write_text("{broken", encoding="utf-8")
    assert read_json(tmp_path / "a.json") == {"x": 1}
    assert read_json(tmp_path / "b.json") is None and read_json(tmp_path / "c.json") is None
    assert read_json(tmp_path / "absent.json") is None
    assert MANIFEST in RESERVED and "gradebook.csv" in RESERVED


def test_one_batch_at_a_time(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with locked(out):
        assert (out / LOCK).is_file()
        other = subprocess.run([sys.executable, "-c", (
            "import sys\nfrom pathlib import Path\nfrom grader.operations.batch.folder import locked, BatchError\n"
            "try:\n    with locked(Path(sys.argv[1])):\n        print('entered')\n"
            "except BatchError as exc:\n    print(exc)\n"), str(out)], capture_output=True, text=True, cwd=ROOT,
            timeout=60)
        assert "another `grader batch` is writing to" in other.stdout
    with locked(out):  # free again once the holder left
        pass
    with pytest.raises(BatchError):
        raise BatchError("for the instructor")
