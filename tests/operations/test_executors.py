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
from tests.operations.batch.helpers import write


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def test_a_grade_past_its_deadline_becomes_a_failure(tmp_path: Path, repo_root: Path) -> None:
    submission = write(tmp_path / "s.py")
    job = GradeJob("slow", submission, "fused_layers", repo_root / "assignments", "interpreter", 3,
                   timeout_s=0.3)
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
    probe = ("from grader.running.processes import confinement; "
             "print('CUDA_VISIBLE_DEVICES' in confinement.PASSED_ENVIRONMENT)")
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
    job = GradeJob("s", tmp_path / "s.py", "a", tmp_path, "cuda", 0, 60.0, concurrent_grades=6)
    args = child_parser().parse_args(child_command(job, tmp_path / "s.py", tmp_path / "out", False)[3:])
    assert args.concurrent_grades == 6


def test_a_batch_profiles_only_where_needed_unless_asked_for_every_case(tmp_path: Path) -> None:
    """`grader batch` replays under Nsight Compute only the timed cases whose counters could name a trap (the GPU's
    exclusive slot is a class's bottleneck); `--profile-every-case` reads them all, as a single grade does."""
    from grader.cli.parser import build_parser
    from grader.operations.batch.run import BatchOptions
    from grader.operations.executors import GradeJob, child_command, child_parser

    batch = ["batch", str(tmp_path), "--assignment", "fused_layers", "--out", str(tmp_path / "o")]
    assert build_parser().parse_args(batch).profile_every_case is False
    assert build_parser().parse_args([*batch, "--profile-every-case"]).profile_every_case is True
    assert BatchOptions.__dataclass_fields__["profile_every_case"].default is False
    for every_case in (False, True):
        job = GradeJob("s", tmp_path / "s.py", "a", tmp_path, "cuda", 0, 60.0, profile_every_case=every_case)
        args = child_parser().parse_args(child_command(job, tmp_path / "s.py", tmp_path / "out", False)[3:])
        assert args.profile_every_case is every_case and args.profile is True


def test_a_student_is_graded_under_the_name_of_their_own_file(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The child grades a copy named as the student named it (the report and grade.json say `erin.py`, and a
    renamed copy of the assignment's file gets `grader grade`'s note), never the assignment's submission_file."""
    commands: list[list[str]] = []

    class Recorded:
        def __init__(self, command: list[str], *_args: object, **_kwargs: object) -> None:
            commands.append(command)

    monkeypatch.setattr(executors, "Child", Recorded)
    for name in ("erin.py", "Copy of fused_layers.py", "erin.ipynb"):
        submission = write(tmp_path / "class" / name, f"# {name}\n")
        job = GradeJob("erin", submission, "fused_layers", tmp_path, "interpreter", 3, 60.0)
        assert executors.graded_name(job) == name
        executors._Attempt(job, tmp_path / "scratch" / name, None, pdeathsig=False)
        graded = Path(executors.child_parser().parse_args(commands[-1][3:]).submission)
        assert graded.name == name and graded.read_text(encoding="utf-8") == f"# {name}\n"


def test_the_batch_banner_names_what_grades_in_words(tmp_path: Path) -> None:
    """"grading 5 of 5 submissions (...) on {describe()}": a phrase, not a list of settings."""
    assert LocalExecutor(1, tmp_path).describe() == "1 local worker"
    assert LocalExecutor(2, tmp_path).describe() == "2 local workers"
    assert LocalExecutor(8, tmp_path, devices=("0", "1")).describe() == "8 local workers (GPUs 0,1)"
    assert executors.RayExecutor(None, 2).describe() == "a local Ray instance"
    assert (executors.RayExecutor("ray://head:10001", 2, gpus_per_task=0.25).describe()
            == "the Ray cluster at ray://head:10001 (0.25 GPU per grade)")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the template serves Linux batches")
def test_a_batchs_children_are_forked_from_its_template_and_know_it_as_their_parent(
        tmp_path: Path, repo_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two grades: both children forked from the batch's template (grader.operations.child_template), each told
    the template's pid as the parent whose end ends it; $GRADER_CHILD_TEMPLATE=0 starts them afresh instead."""
    started: list[tuple[list[str], object]] = []
    real_child = executors.Child

    def recording(command: list[str], *args: object, **kwargs: object) -> executors.Child:
        started.append((command, kwargs.get("template")))
        return real_child(command, *args, **kwargs)

    monkeypatch.setattr(executors, "Child", recording)
    jobs = [GradeJob(name, write(tmp_path / f"{name}.py"), "fused_layers", repo_root / "assignments", "interpreter",
                     3, timeout_s=120) for name in ("ada", "bo")]
    outcomes = list(LocalExecutor(2, tmp_path / "scratch").run(jobs))
    assert sorted(o.student for o in outcomes) == ["ada", "bo"] and all(o.ok for o in outcomes), outcomes
    templates = {id(template) for _, template in started}
    assert len(started) == 2 and len(templates) == 1 and started[0][1] is not None
    parent = started[0][1].pid
    assert all(executors.child_parser().parse_args(c[3:]).parent == parent for c, _ in started)
    assert parent != os.getpid()
