"""grader/running/processes/cpu_threads.py: every process of a grade gets its share of the CPUs for torch's and
numpy's thread pools (the cores over the busy processes of the grades running at once); a caller's own setting wins,
in the grader's process and in every worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.operations import executors
from grader.operations.batch_helpers import BatchHelpers
from grader.operations.executors import GradeJob, JobOutcome, LocalExecutor
from grader.running.processes import confinement, cpu_threads
from grader.running.processes.cpu_threads import THREAD_VARIABLES, thread_environment, threads_per_process


@pytest.fixture
def no_thread_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_each_busy_process_gets_its_share_of_the_cores_and_never_none() -> None:
    assert threads_per_process(16, 1) == 8  # a grade alone: the grader's process and its worker
    assert threads_per_process(16, 16) == 1  # a class of 16 on 16 cores
    assert threads_per_process(64, 4) == 8
    assert threads_per_process(2, 1) == 1
    assert threads_per_process(1, 8) == 1
    assert threads_per_process(4, 0) == 2  # no grade count: one grade's share


def test_the_callers_setting_wins_over_the_share() -> None:
    assert thread_environment(2, {}, cpus=16) == {name: "4" for name in THREAD_VARIABLES}
    assert thread_environment(2, {"OMP_NUM_THREADS": "12"}, cpus=16) == {}
    assert thread_environment(2, {"MKL_NUM_THREADS": "3"}, cpus=16) == {}


def test_the_share_is_exported_for_the_block_then_taken_back(no_thread_settings: None) -> None:
    with cpu_threads.exported(10_000) as added:
        assert added and all(os.environ[name] == "1" for name in THREAD_VARIABLES)
    assert not any(name in os.environ for name in THREAD_VARIABLES)


def test_a_callers_setting_is_left_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    with cpu_threads.exported(10_000) as added:
        assert added == {} and os.environ["OMP_NUM_THREADS"] == "5"
    assert os.environ["OMP_NUM_THREADS"] == "5"


def test_a_worker_gets_one_grades_share_where_nobody_said(no_thread_settings: None, tmp_path: Path) -> None:
    env = confinement.base_environment("interpreter", tmp_path)
    expected = str(threads_per_process(cpu_threads.usable_cpus(), 1))
    assert all(env[name] == expected for name in THREAD_VARIABLES)


def test_a_worker_gets_the_batchs_share_or_the_callers(no_thread_settings: None, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    with cpu_threads.exported(10_000):
        assert confinement.base_environment("cuda", tmp_path)["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    env = confinement.base_environment("cuda", tmp_path)
    assert env["OMP_NUM_THREADS"] == "7" and "MKL_NUM_THREADS" not in env  # the caller's choice, as they made it


def _threads_in_a_fresh_process(code: str, env: dict[str, str]) -> int:
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          check=True)
    return int(done.stdout.strip().splitlines()[-1])


def test_the_grading_process_takes_its_share_before_or_after_importing_torch(no_thread_settings: None) -> None:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    share = "from grader.running.processes import cpu_threads; cpu_threads.share_for_this_process()"
    count = "import torch; print(torch.get_num_threads())"
    alone = threads_per_process(cpu_threads.usable_cpus(), 1)
    assert _threads_in_a_fresh_process(f"{share}; {count}", env) == alone  # torch reads the variable at import
    assert _threads_in_a_fresh_process(f"import torch; {share}; {count}", env) == alone  # set in torch itself
    # a batch's child, forked from a template that imported torch: the batch's share, told in its environment
    assert _threads_in_a_fresh_process(f"import torch; {share}; {count}", {**env, "OMP_NUM_THREADS": "3"}) == 3


def test_a_batch_starts_every_child_and_helper_with_its_share(no_thread_settings: None, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """What a child (and the templates it forks from: they read this process's environment) is started with, while
    the batch runs; nothing is left in the batch's environment after it."""
    seen: list[dict[str, str]] = []

    class Started:
        def __init__(self, job: GradeJob, *_args: object, **_kwargs: object) -> None:
            seen.append({**executors.child_environment(None)})
            self.job, self.device = job, None
            self.child = self

        pid = 0
        overdue = False

        def go(self) -> None:
            pass

        def poll(self) -> int:
            return 0

        def terminate(self) -> None:
            pass

        def outcome(self, timed_out: bool = False) -> JobOutcome:
            return JobOutcome(self.job.student, True, {}, "", "", 0.0, 0.0)

        def cleanup(self) -> None:
            pass

    monkeypatch.setattr(executors, "_Attempt", Started)
    monkeypatch.setattr(executors, "start_helpers", lambda *_args: BatchHelpers())
    jobs = [GradeJob(f"s{i}", tmp_path / "s.py", "a", tmp_path, "interpreter", 3, 60.0) for i in range(3)]
    outcomes = list(LocalExecutor(10_000, tmp_path / "scratch").run(jobs))
    assert len(outcomes) == 3 and len(seen) == 3
    assert all(env["OMP_NUM_THREADS"] == "1" and env["OPENBLAS_NUM_THREADS"] == "1" for env in seen)
    assert not any(name in os.environ for name in THREAD_VARIABLES)
