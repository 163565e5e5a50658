"""The student bundle: what the zip holds and leaves out (fast), and `grader check` run from the unzipped
folder, compared with `grader check` on the full assignment folder (slow: two checks of the template)."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest

from grader.authoring.discovery import find_assignment, load_validated
from grader.authoring.public import dump_toml, public_spec
from grader.authoring.spec import Assignment
from grader.cli import main

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ASSIGNMENTS = ("softmax", "fused_layers", "attention")
SEED = 20261201


def _bundle(repo_root: Path, assignment_id: str, tmp_path: Path) -> tuple[Assignment, Path]:
    out = tmp_path / f"{assignment_id}-student.zip"
    assert main(["student-bundle", "--assignment", assignment_id, "--out", str(out),
                 "--assignments", str(repo_root / "assignments")]) == 0
    return find_assignment(assignment_id, repo_root / "assignments"), out


@pytest.mark.parametrize("assignment_id", ASSIGNMENTS)
def test_public_spec_reads_back_as_written(repo_root: Path, assignment_id: str) -> None:
    raw = tomllib.loads((repo_root / "assignments" / assignment_id / "assignment.toml").read_text())
    public = public_spec(raw)
    assert tomllib.loads(dump_toml(public)) == public
    assert public["cases"] and all(c["visibility"] == "public" for c in public["cases"])
    assert len(public["cases"]) < len(raw["cases"])


@pytest.mark.parametrize("assignment_id", ASSIGNMENTS)
def test_zip_holds_no_secret(repo_root: Path, assignment_id: str, tmp_path: Path) -> None:
    assignment, zip_path = _bundle(repo_root, assignment_id, tmp_path)
    with zipfile.ZipFile(zip_path) as zf:
        files = {name: zf.read(name) for name in zf.namelist()}
    top = assignment.id
    assert set(files) == {f"{top}/README.md", f"{top}/{assignment.submission_file}",
                          f"{top}/assignments/{top}/assignment.toml", f"{top}/assignments/{top}/oracles.py"}
    assert files[f"{top}/{assignment.submission_file}"] == (
        repo_root / "student_template" / top / assignment.submission_file).read_bytes()

    # nothing of reference/<id>/ (reference, mutants, variants): neither by name nor by content
    secret_files = [p for p in (repo_root / "reference" / top).rglob("*") if p.is_file()]
    assert len(secret_files) >= 4
    names = "\n".join(files)
    for secret in secret_files:
        assert secret.name not in names
        assert secret.read_bytes() not in files.values()
    reference_kernel = _first_jit_body(repo_root / "reference" / top / "reference.py")
    assert not any(reference_kernel in data for data in files.values())

    # no hidden case: the spec in the zip has exactly the public cases, and no hidden case id anywhere
    unzipped = tmp_path / "unzipped"
    zipfile.ZipFile(zip_path).extractall(unzipped)
    public = load_validated(unzipped / top / "assignments" / top / "assignment.toml")
    assert [c.id for c in public.cases] == [c.id for c in assignment.cases if c.visibility == "public"]
    assert public.reference_dir is None and public.reference_solution is None
    for case in assignment.cases:
        if case.visibility != "public":
            assert f'"{case.id}"'.encode() not in b"".join(files.values()), case.id


def _first_jit_body(path: Path) -> bytes:
    """The first @triton.jit kernel of a file, from its decorator to the next blank line."""
    text = path.read_text()
    start = text.index("@triton.jit")
    return text[start:text.index("\n\n", start)].encode()


@pytest.mark.slow
def test_check_from_the_unzipped_bundle_reports_as_the_full_folder(repo_root: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assignment, zip_path = _bundle(repo_root, "softmax", tmp_path)
    unzipped = tmp_path / "student"
    zipfile.ZipFile(zip_path).extractall(unzipped)
    folder = unzipped / "softmax"
    capsys.readouterr()
    runs = {}
    for name, assignments in (("student", folder / "assignments"), ("full", repo_root / "assignments")):
        out = tmp_path / f"out-{name}"
        code = main(["check", str(folder / "softmax.py"), "--assignments", str(assignments),
                     "--seed", str(SEED), "--backend", "interpreter", "--out", str(out)])
        printed = capsys.readouterr().out.replace(str(out), "OUT")
        runs[name] = (code, json.loads((out / "results.json").read_text()), printed)
    (code_s, results_s, printed_s), (code_f, results_f, printed_f) = runs["student"], runs["full"]
    assert code_s == code_f == 1  # the template passes no case
    assert results_s["score"] == results_f["score"]

    def verdicts(results: dict) -> list[tuple]:
        return [(t["name"], t["score"], t["max_score"], t.get("status"), t["output"]) for t in results["tests"]]

    assert verdicts(results_s) == verdicts(results_f)
    assert printed_s.splitlines()[1:] == printed_f.splitlines()[1:]  # line 1 holds the elapsed time
