"""grader/operations/batch/folder.py: DIR's file names, reading its JSON leniently, one batch at a time, and no
lock file or empty folder left behind."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.operations.batch import folder
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


def another_batch(out: Path) -> str:
    """What a second process says when it tries to lock `out`."""
    return subprocess.run([sys.executable, "-c", (
        "import sys\nfrom pathlib import Path\nfrom grader.operations.batch.folder import locked, BatchError\n"
        "try:\n    with locked(Path(sys.argv[1])):\n        print('entered')\n"
        "except BatchError as exc:\n    print(exc)\n"), str(out)], capture_output=True, text=True, cwd=ROOT,
        timeout=60).stdout


def test_one_batch_at_a_time(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with locked(out):
        assert (out / LOCK).is_file()
        assert "another `grader batch` is writing to" in another_batch(out)
        (out / "gradebook.json").write_text("{}", encoding="utf-8")
    assert sorted(p.name for p in out.iterdir()) == ["gradebook.json"]  # the lock file went with the batch
    assert another_batch(out) == "entered\n"  # free again once the holder left
    with pytest.raises(BatchError):
        raise BatchError("for the instructor")


def test_a_batch_refused_at_its_start_leaves_no_folder(tmp_path: Path) -> None:
    out = tmp_path / "new" / "out"
    with pytest.raises(BatchError), locked(out):
        raise BatchError("no such folder of submissions")
    assert not (tmp_path / "new").exists()  # DIR and the parent the batch made, gone again
    (tmp_path / "mine").mkdir()
    with locked(tmp_path / "mine"):
        pass
    assert (tmp_path / "mine").is_dir() and not list((tmp_path / "mine").iterdir())  # not made by the batch: kept


def test_a_lock_file_removed_while_waiting_for_it_is_not_held(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch that opened DIR/.batch.lock just before the holder finished (and removed it) locks a file no
    other batch will see: it must try again on the file at the path, else two batches write DIR at once."""
    out = tmp_path / "out"
    out.mkdir()
    flocks = []
    real_flock = fcntl.flock

    def holder_finishes_first(handle: object, operation: int) -> None:
        if not flocks:
            (out / LOCK).unlink()  # the holder removes the file it held, between our open and our flock
        flocks.append(handle)
        real_flock(handle, operation)  # type: ignore[arg-type]

    monkeypatch.setattr(folder.fcntl, "flock", holder_finishes_first)
    with locked(out):
        assert len(flocks) == 2  # the orphaned file locked first, then the one at the path
        assert os.path.samestat(os.stat(out / LOCK), os.fstat(flocks[1].fileno()))  # type: ignore[attr-defined]
        assert "another `grader batch` is writing to" in another_batch(out)
