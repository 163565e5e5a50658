"""grader/operations/batch/run.py: one batch run hands its calibration store to every child, explicitly
(never through the environment), and the CLI builds one store for a batch."""

from __future__ import annotations

import io
import time
from dataclasses import replace
from pathlib import Path

import pytest

from grader.authoring.spec import Assignment, load_assignment
from grader.operations import batch, executors
from grader.operations.executors import GradeJob, JobOutcome
from tests.operations.batch.helpers import write


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def test_the_batch_hands_its_calibration_store_to_every_child(tmp_path: Path, repo_root: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              assignment: Assignment) -> None:
    """The store travels explicitly: BatchOptions -> each GradeJob -> the child's command line (parsed
    back into the same store), never through the environment."""
    from grader.running.timing.calibration import CalibrationStore

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
    printed = io.StringIO()
    batch.run_batch(options, stream=printed)
    assert "grading 2 of 2 submissions (0 already graded, 0 without a file) on recording; seed 3" in printed.getvalue()
    assert [job.student for job in seen] == ["ann", "ben"] and all(job.calibration == store for job in seen)
    assert [job.submission.name for job in seen] == ["ann.py", "ben.py"]  # graded under the student's own name
    assert not (tmp_path / "out" / ".batch.lock").exists() and not (tmp_path / "out" / ".scratch").exists()
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
    from grader.running.timing.calibration import DEFAULT_MAX_AGE_S, default_folder

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


def test_a_batch_of_nothing_leaves_nothing(tmp_path: Path, repo_root: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """`grader batch /no/such/folder --out DIR`: a usage error, and no DIR (nor a lock file in it) left behind."""
    from grader.cli import main

    code = main(["--assignments", str(repo_root / "assignments"), "batch", str(tmp_path / "nowhere"),
                 "--assignment", "fused_layers", "--out", str(tmp_path / "out"), "--backend", "interpreter"])
    assert code == 2 and "nowhere" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
