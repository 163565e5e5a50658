"""grader/operations/executors.py: local processes and Ray behind one interface: GPUs handed out round
robin, registered by name, every child told its GPU and how many grades share it, a grade past its
deadline a failure."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import grader
from grader.authoring.spec import Assignment, load_assignment
from grader.operations import batch, executors
from grader.operations.batch import (
    BatchError,
)
from grader.operations.executors import GradeJob, LocalExecutor
from tests.operations.batch.helpers import SUBMISSION_FILE, write


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def test_a_grade_past_its_deadline_becomes_a_failure(tmp_path: Path, repo_root: Path) -> None:
    submission = write(tmp_path / "s.py")
    job = GradeJob("slow", submission, SUBMISSION_FILE, "fused_layers", repo_root / "assignments",
                   "interpreter", 3, timeout_s=0.3)
    (outcome,) = list(LocalExecutor(1, tmp_path / "scratch").run([job]))
    assert not outcome.ok and outcome.files == {}
    assert outcome.error.startswith("grading took longer than 0.3 s and was stopped")
    assert not list((tmp_path / "scratch").iterdir())  # the attempt's scratch folder is gone

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
    probe = "from grader.running.processes import sandbox; print('CUDA_VISIBLE_DEVICES' in sandbox.PASSED_ENVIRONMENT)"
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
