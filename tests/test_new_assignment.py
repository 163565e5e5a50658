"""`grader new-assignment`: the scaffold validates and passes its selftest as generated."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.authoring.discovery import load_validated
from grader.authoring.scaffold import scaffold_files
from grader.cli import main


def test_scaffold_validates_and_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new-assignment", "row_sums", "--assignments", str(tmp_path)]) == 0
    folder = tmp_path / "row_sums"
    assert {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} == set(
        scaffold_files("row_sums"))
    assignment = load_validated(folder / "assignment.toml")
    assert assignment.submission_file == "row_sums.py"
    assert {c.visibility for c in assignment.cases} == {"public", "hidden"}
    capsys.readouterr()
    assert main(["--assignments", str(tmp_path), "new-assignment", "row_sums"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["new-assignment", "Bad-Id", "--assignments", str(tmp_path)]) == 2


@pytest.mark.slow
def test_scaffold_passes_its_selftest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new-assignment", "row_sums", "--assignments", str(tmp_path)]) == 0
    capsys.readouterr()
    code = main(["selftest", "--assignment", "row_sums", "--assignments", str(tmp_path),
                 "--backend", "interpreter", "--seed", "7"])
    printed = capsys.readouterr().out
    rows = [line for line in printed.splitlines() if line.startswith(("reference ", "last_column_dropped "))]
    assert code == 0, printed
    assert len(rows) == 2 and all(line.rstrip().endswith(" ok") for line in rows), printed
    assert "2 of 2 as expected" in printed
