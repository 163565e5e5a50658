"""grader/operations/batch/commits.py: one student's folder put in place whole, and what it then counts as
(current, outdated, an error)."""

from __future__ import annotations

from pathlib import Path

from grader.operations import batch
from grader.operations.batch import (
    Manifest,
)
from grader.operations.executors import JobOutcome
from tests.operations.batch.helpers import fake_result, outcome_files  # noqa: F401


def test_commit_puts_a_whole_folder_in_place(tmp_path: Path) -> None:
    manifest = Manifest("fused_layers", "interpreter", 3, "gen1")
    result = fake_result("ann", {"a-1": True})
    record = {"generation": "gen1", "submission_sha256": "abc"}
    (tmp_path / "ann").mkdir()
    (tmp_path / "ann" / "stale.txt").write_text("old")
    batch.commit(tmp_path, JobOutcome("ann", True, outcome_files(result)), record)
    names = sorted(p.name for p in (tmp_path / "ann").iterdir())
    assert names == ["batch-record.json", "grade.json", "results.json"]
    state, loaded, _ = batch.result_state(tmp_path / "ann", manifest, "abc")
    assert state == "current" and loaded == result
    assert batch.result_state(tmp_path / "ann", manifest, "changed")[0] == "outdated"
    next_generation = Manifest("fused_layers", "interpreter", 3, "gen2")
    assert batch.result_state(tmp_path / "ann", next_generation, "abc")[0] == "outdated"
    batch.commit(tmp_path, JobOutcome("ann", False, {}, "the grading process ended with exit code 1"), record)
    assert sorted(p.name for p in (tmp_path / "ann").iterdir()) == ["error.json"]
    state, loaded, info = batch.result_state(tmp_path / "ann", manifest, "abc")
    assert (state, loaded) == ("error", None) and "exit code 1" in info["error"]
    assert not list((tmp_path / ".scratch").iterdir())
    assert batch.result_state(tmp_path / "nobody", manifest, "abc")[0] == "none"
