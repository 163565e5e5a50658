"""grader/operations/batch/run.py with a roster: a batch whose roster is Canvas's gradebook export writes a
canvas.csv that imports onto the right students (IDs filled), lists roster students without a submission as
missing, never writes a pending student, and writes similarity.csv and similarity.html beside the gradebook,
linked from the class report; a rerun imports the same way (column, roster, missing score kept in DIR). The
grades are hand-made (an executor that grades nothing): fast."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from grader.authoring.spec import Assignment, load_assignment
from grader.cli import main
from grader.operations import batch
from grader.operations.executors import JobOutcome
from tests.operations.batch.helpers import fake_result, outcome_files, write
from tests.operations.batch.test_roster import CANVAS_EXPORT


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


class HandGrades:
    """Grades every job with a hand-made result, except `left`: never answered (as if interrupted)."""

    def __init__(self, left: str) -> None:
        self.left = left

    def describe(self) -> str:
        return "hand grades"

    def grades_per_gpu(self) -> int:
        return 1

    def run(self, jobs, on_start=None):
        for job in jobs:
            if job.student != self.left:
                result = fake_result(job.student, {"linear-a": True, "linear-b": job.student != "GHOPPER"})
                yield JobOutcome(job.student, True, outcome_files(result))


def test_a_batch_with_a_canvas_export_as_roster(tmp_path: Path, repo_root: Path, assignment: Assignment,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    reference = (repo_root / "reference" / "fused_layers" / "reference.py").read_text(encoding="utf-8")
    subs = tmp_path / "subs"
    write(subs / "ada@uni.edu.py", reference)
    write(subs / "GHOPPER.py", reference.replace("offs", "offsets"))  # a renamed copy of ada's
    write(subs / "aturing@uni.edu.py", "x = 1\n")  # never answered: pending
    write(subs / "stranger.py", "y = 2\n")  # matches no roster student
    roster = write(tmp_path / "export.csv", CANVAS_EXPORT)
    monkeypatch.setattr(batch.run, "make_executor", lambda options, scratch: HandGrades("aturing@uni.edu"))
    options = batch.BatchOptions(subs, assignment, repo_root / "assignments", tmp_path / "out", "interpreter",
                                 seed=3, roster=roster, canvas_column="Fused layers (12345)")
    summary = batch.run_batch(options, stream=io.StringIO())
    out = tmp_path / "out"
    table = list(csv.reader(io.StringIO((out / "canvas.csv").read_text(encoding="utf-8"))))
    assert table[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Fused layers (12345)"]
    assert table[1][0] == "Points Possible"
    assert table[2:] == [["Hopper, Grace", "1002", "S-200", "GHOPPER", "Sec 2", "2"],
                         ["Lovelace, Ada", "1001", "S-100", "ada@uni.edu", "Sec 1, Tuesday", "4"]]
    book = json.loads((out / "gradebook.json").read_text(encoding="utf-8"))
    status = {r["student"]: r["status"] for r in book["rows"]}
    assert status == {"GHOPPER": "graded", "ada@uni.edu": "graded", "aturing@uni.edu": "pending",
                      "enoether@uni.edu": "missing", "stranger": "graded"}
    assert book["summary"]["missing"] == 1 and summary.counts["missing"] == 1
    assert book["roster"]["unmatched"] == ["stranger"]
    left_out = {e["student"]: e["why"] for e in book["canvas"]["left_out"]}
    assert set(left_out) == {"aturing@uni.edu", "enoether@uni.edu", "stranger"}
    report = (out / "class_report.html").read_text(encoding="utf-8")
    assert "1 missing" in report and "Noether, Emmy" in report and 'href="stranger/report.html"' in report
    # similarity beside the gradebook, linked from the class report: the renamed copy is the top pair
    assert {p.name for p in summary.files} >= {"similarity.csv", "similarity.html", "canvas.csv"}
    pairs = list(csv.DictReader(io.StringIO((out / "similarity.csv").read_text(encoding="utf-8"))))
    assert (pairs[0]["a"], pairs[0]["b"], pairs[0]["flagged"]) == ("GHOPPER", "ada@uni.edu", "yes")
    assert '<a href="similarity.html">similarity.html</a>' in report
    # every list of students names them as the roster does: gradebook.csv and .json, the class report, similarity
    who = {r["student"]: (r["name"], r["email"], r["sid"], r["section"])
           for r in csv.DictReader(io.StringIO((out / "gradebook.csv").read_text(encoding="utf-8")))}
    assert who == {"GHOPPER": ("Hopper, Grace", "", "S-200", "Sec 2"),
                   "ada@uni.edu": ("Lovelace, Ada", "ada@uni.edu", "S-100", "Sec 1, Tuesday"),
                   "aturing@uni.edu": ("Turing, Alan", "aturing@uni.edu", "S-300", "Sec 2"),
                   "enoether@uni.edu": ("Noether, Emmy", "enoether@uni.edu", "S-400", "Sec 1"),
                   "stranger": ("", "", "", "")}
    assert {r["student"]: r["name"] for r in book["rows"]}["GHOPPER"] == "Hopper, Grace"
    gradebook_table = re.sub(r"<[^>]+>", "", report[report.index('id="gradebook"'):])  # the text a reader sees
    for name in ("Hopper, Grace", "Lovelace, Ada", "Turing, Alan", "S-200", "Sec 1, Tuesday"):
        assert name in gradebook_table, name
    assert (pairs[0]["name_a"], pairs[0]["sid_a"], pairs[0]["section_a"]) == ("Hopper, Grace", "S-200", "Sec 2")
    assert (pairs[0]["name_b"], pairs[0]["sid_b"]) == ("Lovelace, Ada", "S-100")
    assert "Hopper, Grace · S-200 · Sec 2" in (out / "similarity.html").read_text(encoding="utf-8")


def test_the_rosters_one_assignment_column_heads_canvas_csv(tmp_path: Path, repo_root: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A Canvas export with one assignment column: canvas.csv imports onto it without --canvas-column (not a new
    column named after the title), and the batch says once that its Points Possible is not the grade's maximum;
    --canvas-column still wins."""
    reference = (repo_root / "reference" / "fused_layers" / "reference.py").read_text(encoding="utf-8")
    write(tmp_path / "subs" / "ada@uni.edu.py", reference)
    roster = write(tmp_path / "export.csv", CANVAS_EXPORT.replace("40.00", "5"))
    monkeypatch.setattr(batch.run, "make_executor", lambda options, scratch: HandGrades("nobody"))
    argv = ["--assignments", str(repo_root / "assignments"), "batch", str(tmp_path / "subs"), "--assignment",
            "fused_layers", "--backend", "interpreter", "--seed", "3", "--roster", str(roster)]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    header, points = list(csv.reader(io.StringIO((tmp_path / "out" / "canvas.csv").read_text(encoding="utf-8"))))[:2]
    assert header[-1] == "Fused layers (12345)" and points[-1] == "40"
    printed = capsys.readouterr()
    warnings = [line for line in (printed.out + printed.err).splitlines() if "points possible" in line]
    assert warnings == ["warning: the roster export.csv says Fused layers (12345) has 5 points possible, but this "
                        "assignment's grades are out of 40: set its points in Canvas to 40 before importing "
                        "canvas.csv"]
    assert main([*argv, "--out", str(tmp_path / "given"), "--canvas-column", "Layers (555)"]) == 0
    given = (tmp_path / "given" / "canvas.csv").read_text(encoding="utf-8")
    assert given.splitlines()[0].endswith(",Layers (555)")
    assert "points possible" not in capsys.readouterr().out  # the export has no column 555 to compare


def test_a_roster_that_cannot_be_read_is_a_usage_error(tmp_path: Path, repo_root: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "subs" / "ann.py")
    bad = write(tmp_path / "bad.csv", "a,b,c\n")
    for roster, words in ((tmp_path / "nowhere.csv", "cannot read the roster"), (bad, "line 1 has 3 values")):
        code = main(["--assignments", str(repo_root / "assignments"), "batch", str(tmp_path / "subs"),
                     "--assignment", "fused_layers", "--out", str(tmp_path / "out"), "--backend", "interpreter",
                     "--roster", str(roster)])
        assert code == 2 and words in capsys.readouterr().err
        assert not (tmp_path / "out").exists()  # refused before anything was made


def test_a_rerun_imports_onto_the_same_canvas_column(tmp_path: Path, repo_root: Path, assignment: Assignment,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Rerun without --canvas-column, --roster and --missing-score: canvas.csv's header, its students' Canvas IDs
    and its missing student's score are unchanged; a different column given is used, and said."""
    reference = (repo_root / "reference" / "fused_layers" / "reference.py").read_text(encoding="utf-8")
    subs, out = tmp_path / "subs", tmp_path / "out"
    write(subs / "ada@uni.edu.py", reference)
    write(subs / "GHOPPER.py", reference)
    roster = write(tmp_path / "export.csv", CANVAS_EXPORT)
    monkeypatch.setattr(batch.run, "make_executor", lambda options, scratch: HandGrades("nobody"))
    argv = ["--assignments", str(repo_root / "assignments"), "batch", str(subs), "--assignment", "fused_layers",
            "--out", str(out), "--backend", "interpreter", "--seed", "3"]
    assert main([*argv, "--canvas-column", "Fused layers (12345)", "--roster", str(roster),
                 "--missing-score", "0"]) == 0
    first = (out / "canvas.csv").read_text(encoding="utf-8")
    assert first.splitlines()[0].endswith(",Fused layers (12345)")
    assert '"Noether, Emmy",1004,S-400,enoether@uni.edu,Sec 1,0' in first  # the roster, and --missing-score
    capsys.readouterr()
    write(subs / "GHOPPER.py", reference + "# changed\n")  # something to grade again
    assert main(argv) == 0
    assert (out / "canvas.csv").read_text(encoding="utf-8") == first
    assert "earlier runs used" not in capsys.readouterr().out
    assert main([*argv, "--canvas-column", "Fused layers (999)"]) == 0
    printed = capsys.readouterr().out
    assert ("canvas.csv's column: 'Fused layers (999)' (this folder's earlier runs used 'Fused layers (12345)')\n"
            in printed)
    assert (out / "canvas.csv").read_text(encoding="utf-8").splitlines()[0].endswith(",Fused layers (999)")
    roster.unlink()
    assert main(argv) == 2
    assert "the roster this folder's earlier runs used; pass --roster FILE" in capsys.readouterr().err
