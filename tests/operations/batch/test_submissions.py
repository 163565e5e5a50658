"""grader/operations/batch/submissions.py: every layout of SUBMISSIONS (files, folders, a zip with a
wrapping folder and hostile entries, Gradescope's export) and student ids made folder-safe."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from grader.operations.batch import (
    BatchError,
    discover_submissions,
)
from grader.publishing.gradebook import (
    Student,
)
from tests.operations.batch.helpers import METADATA, SUBMISSION_FILE, ids, write  # noqa: F401


def test_folder_of_files_uses_file_stems(tmp_path: Path) -> None:
    write(tmp_path / "in" / "bob.py")
    write(tmp_path / "in" / "alice.py")
    write(tmp_path / "in" / "notes.txt")
    write(tmp_path / "in" / ".hidden.py")
    found = discover_submissions(tmp_path / "in", SUBMISSION_FILE, tmp_path / "scratch")
    assert ids(found) == ["alice", "bob"]
    assert found[0].path == tmp_path / "in" / "alice.py" and found[0].source == "alice.py"
    assert len(found[0].sha256) == 64

def test_folder_of_folders_prefers_the_assignment_file(tmp_path: Path) -> None:
    write(tmp_path / "in" / "carol" / "helpers.py")
    write(tmp_path / "in" / "carol" / "deep" / SUBMISSION_FILE, "deep\n")
    write(tmp_path / "in" / "carol" / SUBMISSION_FILE, "top\n")
    write(tmp_path / "in" / "dan" / "my_kernels.py")  # the only .py: taken whatever its name
    write(tmp_path / "in" / "erin" / "a.py")
    write(tmp_path / "in" / "erin" / "b.py")  # ambiguous
    (tmp_path / "in" / "fay").mkdir()  # nothing
    write(tmp_path / "in" / "gus" / "__MACOSX" / f"._{SUBMISSION_FILE}")
    found = {s.id: s for s in discover_submissions(tmp_path / "in", SUBMISSION_FILE, tmp_path / "scratch")}
    assert sorted(found) == ["carol", "dan", "erin", "fay", "gus"]
    assert found["carol"].path is not None and found["carol"].path.read_text() == "top\n"
    assert found["dan"].path is not None and found["dan"].path.name == "my_kernels.py"
    assert found["erin"].path is None and "several .py files" in found["erin"].problem
    assert "a.py" in found["erin"].problem and "b.py" in found["erin"].problem
    assert found["fay"].path is None and f"no {SUBMISSION_FILE}" in found["fay"].problem
    assert found["gus"].path is None

def test_zip_with_a_wrapping_folder_and_hostile_entries(tmp_path: Path) -> None:
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("export/alice/fused_layers.py", "a\n")
        zf.writestr("export/bob.py", "b\n")
        zf.writestr("export/../../escaped.py", "evil\n")
        zf.writestr("/abs/evil.py", "evil\n")
        link = zipfile.ZipInfo("export/link.py")
        link.external_attr = 0o120777 << 16
        zf.writestr(link, "/etc/passwd")
    found = discover_submissions(archive, SUBMISSION_FILE, tmp_path / "scratch")
    assert ids(found) == ["alice", "bob"]
    assert found[0].path is not None and found[0].path.read_text() == "a\n"
    assert not (tmp_path / "escaped.py").exists() and not list(tmp_path.rglob("evil.py"))
    assert all(tmp_path / "scratch" in s.path.parents for s in found if s.path)

def test_gradescope_export_layout(tmp_path: Path) -> None:
    root = tmp_path / "assignment_42_export"
    (root / "submission_metadata.yml").parent.mkdir(parents=True)
    (root / "submission_metadata.yml").write_text(METADATA, encoding="utf-8")
    for folder in ("submission_101", "submission_102", "submission_103"):
        write(root / folder / SUBMISSION_FILE)
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in root.rglob("*"):
            if path.is_file():
                zf.write(path, path.relative_to(tmp_path))
    found = {s.id: s for s in discover_submissions(archive, SUBMISSION_FILE, tmp_path / "scratch")}
    assert sorted(found) == ["submission_101", "submission_102", "submission_103"]
    ada = Student("submission_101", "Ada Lovelace", "ada@example.edu", "100")
    assert found["submission_101"].student == ada
    assert found["submission_102"].student.name == "Pair One; Pair O'Two"
    assert found["submission_102"].student.sid == "200; 201"

def test_ids_are_made_folder_safe_and_must_not_collide(tmp_path: Path) -> None:
    write(tmp_path / "a" / "jo smith.py")
    write(tmp_path / "a" / "-x.py")
    assert ids(discover_submissions(tmp_path / "a", SUBMISSION_FILE, tmp_path / "s")) == ["_x", "jo_smith"]
    write(tmp_path / "b" / "jo smith.py")
    write(tmp_path / "b" / "jo_smith" / SUBMISSION_FILE)
    with pytest.raises(BatchError, match="both give student id 'jo_smith'"):
        discover_submissions(tmp_path / "b", SUBMISSION_FILE, tmp_path / "s")
    write(tmp_path / "c" / "gradebook.json" / SUBMISSION_FILE)
    with pytest.raises(BatchError, match="cannot be a student id"):
        discover_submissions(tmp_path / "c", SUBMISSION_FILE, tmp_path / "s")
    (tmp_path / "d").mkdir()
    with pytest.raises(BatchError, match="no submissions"):
        discover_submissions(tmp_path / "d", SUBMISSION_FILE, tmp_path / "s")
    with pytest.raises(BatchError, match="neither a folder nor a zip"):
        discover_submissions(tmp_path / "missing", SUBMISSION_FILE, tmp_path / "s")
