"""Batch grading without grading (fast): finding submissions in every layout, the manifest rules,
committing results, the gradebook files and the class statistics, on hand-made results.

The end-to-end batches (real grades, 1 and 2 workers, Ray, the kill test, chromium) are in
tests/e2e/test_batch_grading.py.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
import time
import zipfile
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

import grader
from grader.authoring.spec import Assignment, load_assignment
from grader.operations import batch, executors
from grader.operations.batch import (
    BatchError,
    Manifest,
    discover_submissions,
    read_gradescope_metadata,
    settle_manifest,
)
from grader.operations.executors import GradeJob, JobOutcome, LocalExecutor
from grader.publishing.gradebook import (
    Gradebook,
    Student,
    class_report_html,
    class_stats,
    gradebook_csv,
    gradebook_json,
    graded_row,
    histogram,
    target_points,
    ungraded_row,
)
from grader.results import CaseResult, GradeResult

SUBMISSION_FILE = "fused_layers.py"

METADATA = """\
submission_101:
  :submitters:
  - :name: Ada Lovelace
    :sid: '100'
    :email: ada@example.edu
  :created_at: 2026-11-01 10:00:00.000000000 Z
  :score: 12.0
submission_102:
  :submitters:
  - :name: "Pair One"
    :sid: '200'
    :email: one@example.edu
  - :name: Pair O'Two
    :sid: '201'
    :email: two@example.edu
  :history:
  - :owners:
    - :name: Not A Submitter
submission_103:
  :submitters:
  - :name: '=HYPERLINK("x")'
"""


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def write(path: Path, text: str = "x = 1\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def ids(submissions: list[batch.Submission]) -> list[str]:
    return [s.id for s in submissions]


# ------------------------------------------------------------------------------------------- layouts


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


def test_gradescope_metadata_reader() -> None:
    meta = read_gradescope_metadata(METADATA)
    assert meta["submission_101"] == [{"name": "Ada Lovelace", "sid": "100", "email": "ada@example.edu"}]
    assert [p["name"] for p in meta["submission_102"]] == ["Pair One", "Pair O'Two"]
    assert [p["sid"] for p in meta["submission_102"]] == ["200", "201"]
    assert meta["submission_103"] == [{"name": '=HYPERLINK("x")'}]


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


# ------------------------------------------------------------------------------------------- manifest, commit


def test_manifest_keeps_seed_and_generation_until_forced(tmp_path: Path) -> None:
    first = settle_manifest(tmp_path, "fused_layers", "interpreter", None, False, lambda: 77)
    assert (first.seed, first.backend) == (77, "interpreter")
    assert settle_manifest(tmp_path, "fused_layers", "interpreter", None, False, lambda: 1) == first
    assert settle_manifest(tmp_path, "fused_layers", "interpreter", 77, False, lambda: 1) == first
    with pytest.raises(BatchError, match="graded with seed 77; pass --force"):
        settle_manifest(tmp_path, "fused_layers", "interpreter", 5, False, lambda: 1)
    with pytest.raises(BatchError, match="interpreter backend, this run would use cuda"):
        settle_manifest(tmp_path, "fused_layers", "cuda", None, False, lambda: 1)
    with pytest.raises(BatchError, match="not 'softmax'"):
        settle_manifest(tmp_path, "softmax", "interpreter", None, False, lambda: 1)
    forced = settle_manifest(tmp_path, "fused_layers", "interpreter", None, True, lambda: 1)
    assert forced.seed == 77 and forced.generation != first.generation
    reseeded = settle_manifest(tmp_path, "fused_layers", "interpreter", 5, True, lambda: 1)
    assert reseeded.seed == 5
    assert json.loads((tmp_path / "batch.json").read_text())["generation"] == reseeded.generation


def fake_result(student: str, passed: dict[str, bool], traps: dict[str, tuple[str, ...]] | None = None,
                seconds: float = 1.0) -> GradeResult:
    traps = traps or {}
    cases = tuple(
        CaseResult(case_id=cid, target=cid.split("-")[0], title=cid, visibility="public", max_score=2.0,
                   score=2.0 if ok else 0.0, passed=ok, message="", traps=traps.get(cid, ()))
        for cid, ok in passed.items()
    )
    return GradeResult(assignment="fused_layers", submission=SUBMISSION_FILE, backend="interpreter", seed=3,
                       versions={}, cases=cases, execution_time_s=seconds)


def outcome_files(result: GradeResult) -> dict[str, bytes]:
    return {"grade.json": json.dumps(result.to_dict()).encode(), "results.json": b'{"score": 0, "tests": []}'}


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


def test_a_grade_past_its_deadline_becomes_a_failure(tmp_path: Path, repo_root: Path) -> None:
    submission = write(tmp_path / "s.py")
    job = GradeJob("slow", submission, SUBMISSION_FILE, "fused_layers", repo_root / "assignments",
                   "interpreter", 3, timeout_s=0.3)
    (outcome,) = list(LocalExecutor(1, tmp_path / "scratch").run([job]))
    assert not outcome.ok and outcome.files == {}
    assert outcome.error.startswith("grading took longer than 0.3 s and was stopped")
    assert not list((tmp_path / "scratch").iterdir())  # the attempt's scratch folder is gone


# ------------------------------------------------------------------------------------------- gradebook


def sample_book(assignment: Assignment) -> tuple[Gradebook, dict[str, GradeResult]]:
    results = {
        "ann": fake_result("ann", {"a-1": True, "a-2": True, "b-1": True}, seconds=3.0),
        "ben": fake_result("ben", {"a-1": False, "a-2": True, "b-1": False},
                           {"a-1": ("eps-missing",), "b-1": ("eps-missing", "oob-read")}, seconds=9.0),
        "cat": fake_result("cat", {"a-1": False, "a-2": False, "b-1": True},
                           {"a-1": ("timeout",), "a-2": ("timeout",)}, seconds=40.0),
    }
    record = {"finished_at": "2026-11-30T00:00:00+00:00", "device": "", "submission_sha256": "f" * 64}
    rows = [graded_row(Student(sid, name=f"=cmd|{sid}"), result, record) for sid, result in results.items()]
    failure = "-the grading process ended with exit code 1"
    rows.append(ungraded_row(Student("dee"), "error", 6.0, error=failure))
    rows.append(ungraded_row(Student("eve"), "no-submission", 6.0, error="no fused_layers.py"))
    book = Gradebook("fused_layers", "Fused layers", 6.0, {"a": 4.0, "b": 2.0}, tuple(rows),
                     "2026-11-30T00:00:00+00:00", 3, "interpreter")
    return book, results


def test_gradebook_json_and_csv(assignment: Assignment) -> None:
    book, _ = sample_book(assignment)
    data = gradebook_json(book)
    assert data["summary"] == {"students": 5, "graded": 3, "outdated": 0, "error": 1, "pending": 0,
                               "no-submission": 1, "mean": round((6 + 2 + 2) / 3, 4), "median": 2.0}
    ben = data["rows"][1]
    assert ben["score"] == 2.0 and ben["target_scores"] == {"a": 2.0, "b": 0.0}
    assert ben["traps"] == ["eps-missing", "oob-read"]
    rows = list(csv.DictReader(io.StringIO(gradebook_csv(book))))
    assert [r["student"] for r in rows] == ["ann", "ben", "cat", "dee", "eve"]
    assert rows[1]["score"] == "2" and rows[1]["a"] == "2" and rows[1]["b"] == "0"
    assert rows[1]["traps"] == "eps-missing;oob-read"
    assert rows[3]["status"] == "error" and rows[3]["score"] == "" and rows[3]["a"] == ""
    assert rows[0]["name"] == "'=cmd|ann"  # not a spreadsheet formula
    assert rows[3]["error"].startswith("'-the grading process")


def test_gradebook_json_matches_the_documented_schema(repo_root: Path, assignment: Assignment) -> None:
    doc = (repo_root / "docs" / "gradebook.md").read_text(encoding="utf-8")
    schema = json.loads(re.search(r"<!-- schema -->\s*```json\n(.*?)```", doc, re.S).group(1))
    book, _ = sample_book(assignment)
    jsonschema.validate(gradebook_json(book), schema)


def test_histogram_bins_and_full_marks(assignment: Assignment) -> None:
    book, _ = sample_book(assignment)
    bins = histogram(book.rows)
    assert len(bins) == 11 and bins[-1].label == "100%" and bins[-1].count == 1
    assert bins[3].label == "30–40%" and bins[3].count == 2  # 2 / 6 points
    assert sum(b.count for b in bins) == 3


def test_class_stats_and_report(assignment: Assignment) -> None:
    book, results = sample_book(assignment)
    stats = class_stats(book, results, assignment)
    traps = {t.trap: t for t in stats.traps}
    assert [t.trap for t in stats.traps] == ["eps-missing", "oob-read", "timeout"]  # by count, then name
    assert traps["eps-missing"].students == 1 and traps["eps-missing"].examples == ("ben",)
    assert traps["eps-missing"].top_cases == (("a-1", 1), ("b-1", 1))
    assert traps["timeout"].top_cases[0][0] == "a-1"
    rates = {c.case_id: (c.passed, c.graded) for c in stats.cases}
    assert rates == {"a-1": (1, 3), "a-2": (2, 3), "b-1": (2, 3)}
    assert [s.student for s in stats.slowest] == ["cat", "ben", "ann"]
    assert [(s.student, s.timed_out_cases) for s in stats.hanging] == [("cat", 2)]
    assert [r.student for r in stats.unscored] == ["dee", "eve"]
    html = class_report_html(stats)
    assert '<table id="trap-frequencies">' in html
    assert html.count('<tr data-trap="') == 3
    assert '<a href="ben/report.html">ben</a>' in html
    assert "=cmd|ann" in html and "<script" not in html


def test_target_points_cover_every_target(assignment: Assignment) -> None:
    points = target_points(assignment, "interpreter")
    assert list(points) == list(assignment.targets)
    assert sum(points.values()) == sum(c.points for c in assignment.cases_for("interpreter"))


# ------------------------------------------------------------------------------------------- GPUs


def test_worker_slots_take_gpus_round_robin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert executors.cuda_devices() == ["2", "5"]
    executor = LocalExecutor(4, tmp_path, executors.cuda_devices())
    assert [executor._device(slot) for slot in range(4)] == ["2", "5", "2", "5"]
    assert LocalExecutor(2, tmp_path)._device(1) is None
    assert executors.default_workers("cuda", ["0"]) <= executors.GRADES_PER_GPU
    assert executors.default_workers("interpreter", []) >= 1


def test_executors_are_registered_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          assignment: Assignment) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    options = batch.BatchOptions(tmp_path, assignment, tmp_path, tmp_path / "out", "cuda", workers=3)
    local = batch.make_executor(options, tmp_path)
    assert isinstance(local, LocalExecutor) and local.workers == 3 and local.devices == ("0",)
    ray = batch.make_executor(replace(options, executor="ray"), tmp_path)
    assert isinstance(ray, executors.RayExecutor) and ray.gpus_per_task == 1 / executors.GRADES_PER_GPU
    with pytest.raises(BatchError, match=r"unknown executor 'slurm' \(local or ray\)"):
        batch.make_executor(replace(options, executor="slurm"), tmp_path)
    assert set(executors.EXECUTORS) == {"local", "ray"}


def test_the_grading_process_hands_its_gpu_to_the_worker(tmp_path: Path) -> None:
    from grader.operations.executors import child_environment

    env = child_environment("1")
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(Path(grader.__file__).resolve().parents[1])
    probe = "from grader.running import sandbox; print('CUDA_VISIBLE_DEVICES' in sandbox.PASSED_ENVIRONMENT)"
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60,
                          check=True)
    assert done.stdout.strip() == "True"


def test_every_child_knows_how_many_grades_share_its_gpu(tmp_path: Path) -> None:
    """Each grade's workers get a share of GPU memory (no second pass for neighbours): the executor says how
    many grades share a GPU and the child's command line carries it."""
    from grader.operations.executors import GradeJob, LocalExecutor, child_command, child_parser

    assert LocalExecutor(8, tmp_path, devices=("0",)).grades_per_gpu() == 8
    assert LocalExecutor(8, tmp_path, devices=("0", "1")).grades_per_gpu() == 4
    assert LocalExecutor(3, tmp_path).grades_per_gpu() == 3
    job = GradeJob("s", tmp_path / "s.py", "s.py", "a", tmp_path, "cuda", 0, 60.0, concurrent_grades=6)
    args = child_parser().parse_args(child_command(job, tmp_path / "s.py", tmp_path / "out", False)[3:])
    assert args.concurrent_grades == 6


# ------------------------------------------------------------------------------------------- calibration


def test_the_batch_hands_its_calibration_store_to_every_child(tmp_path: Path, repo_root: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              assignment: Assignment) -> None:
    """The store travels explicitly: BatchOptions -> each GradeJob -> the child's command line (parsed
    back into the same store), never through the environment."""
    from grader.running.calibration import CalibrationStore

    for student in ("ann", "ben"):
        write(tmp_path / "subs" / f"{student}.py")
    store = CalibrationStore(tmp_path / "bars", max_age_s=7200.0).recalibrated()
    seen: list[GradeJob] = []

    class Recording:
        def describe(self) -> str:
            return "recording"

        def grades_per_gpu(self) -> int:
            return 1

        def run(self, jobs, on_start=None):
            for job in jobs:
                seen.append(job)
                yield JobOutcome(job.student, False, error="not graded: a test")

    monkeypatch.setattr(batch.run, "make_executor", lambda options, scratch: Recording())  # where run_batch finds it
    options = batch.BatchOptions(tmp_path / "subs", assignment, repo_root / "assignments", tmp_path / "out",
                                 "interpreter", seed=3, calibration=store)
    batch.run_batch(options, stream=io.StringIO())
    assert [job.student for job in seen] == ["ann", "ben"] and all(job.calibration == store for job in seen)
    command = executors.child_command(seen[0], tmp_path / "s.py", tmp_path / "o", pdeathsig=False)
    assert f"--calibration-dir={store.folder}" in command
    args = executors.child_parser().parse_args(command[3:])
    parsed = CalibrationStore.from_args(args.calibration_dir, args.calibration_max_age_s, args.calibrated_after)
    assert parsed == store
    plain = executors.child_parser().parse_args(
        executors.child_command(replace(seen[0], calibration=None), tmp_path / "s.py", tmp_path / "o", False)[3:])
    assert plain.calibration_dir is None  # a job without a store: the child measures for itself
    assert not any("CALIBRATION" in name for name in executors.child_environment(None))


def test_the_cli_builds_one_store_for_a_batch(tmp_path: Path, repo_root: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.cli import main
    from grader.running.calibration import DEFAULT_MAX_AGE_S, default_folder

    got: list[batch.BatchOptions] = []

    def fake_run_batch(options: batch.BatchOptions) -> batch.BatchSummary:
        got.append(options)
        return batch.BatchSummary()

    monkeypatch.setattr(batch, "run_batch", fake_run_batch)
    argv = ["--assignments", str(repo_root / "assignments"), "batch", str(tmp_path), "--assignment", "fused_layers",
            "--out", str(tmp_path / "out"), "--backend", "interpreter"]
    before = time.time()
    assert main([*argv, "--calibration-dir", "bars", "--recalibrate", "--calibration-max-age", "0.5"]) == 0
    assert main(argv) == 0
    explicit, default = (options.calibration for options in got)
    assert explicit is not None and default is not None
    assert explicit.folder == Path("bars").resolve() and explicit.max_age_s == 1800.0
    assert explicit.not_before >= before  # --recalibrate: what was measured before this run is stale
    assert default.folder == default_folder() and default.max_age_s == DEFAULT_MAX_AGE_S
    assert default.not_before == 0.0
