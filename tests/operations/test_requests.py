"""grader/operations/requests.py: what a command asks, built once: the calibration settings name their folder and
age (a negative age is the user's mistake), and make the store a grade reads its bars from."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.operations.requests import CalibrationSettings, CheckFile, GradeFiles, UsageError


def test_calibration_settings_make_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = CalibrationSettings(folder=tmp_path / "bars", max_age_s=60.0)
    store = settings.store()
    assert store.folder == (tmp_path / "bars").resolve() and store.max_age_s == 60.0 and store.not_before == 0.0
    assert CalibrationSettings(folder=tmp_path, recalibrate=True).store().not_before > 0
    monkeypatch.setenv("GRADER_CACHE_DIR", str(tmp_path / "cache"))
    assert CalibrationSettings().resolved_folder == (tmp_path / "cache" / "calibration").resolve()
    with pytest.raises(UsageError, match="must not be negative"):
        CalibrationSettings(max_age_s=-1.0)


def test_requests_are_frozen_values_with_the_commands_defaults(tmp_path: Path) -> None:
    grade = GradeFiles(tmp_path, "softmax", (tmp_path / "a.py",), tmp_path / "out")
    assert (grade.backend, grade.seed, grade.sanitize) == ("auto", None, False)
    check = CheckFile(tmp_path, tmp_path / "softmax.py")
    assert (check.assignment_id, check.targets, check.out) == (None, (), None)
    with pytest.raises(AttributeError):
        grade.seed = 3  # type: ignore[misc]
