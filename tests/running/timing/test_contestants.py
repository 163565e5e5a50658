"""grader/running/timing/contestants.py without a GPU: the deadline of a request at the timed size, the spin-up
of a grade's first timing and the shorter one of the next. (The timer and the reference at work, on a fake clock:
tests/judging/test_performance.py; on a GPU: tests/e2e/test_gpu_performance.py.)"""

from __future__ import annotations

from pathlib import Path

from grader.authoring.spec import PerformanceCase, load_assignment
from grader.running.timing.contestants import (
    COMPILE_LIMIT_S,
    RUN_GRACE_S,
    SLOWDOWN_ALLOWED,
    Contestants,
    timed_deadline,
)
from grader.running.worker import performance_timing
from tests.conftest import ROOT

PERF = PerformanceCase(id="p", target="layernorm", dims={"M": 4096, "N": 4096}, tolerance="rowwise", timeout_s=90)


def test_timed_deadline() -> None:
    unknown = timed_deadline(PERF, None)
    assert (unknown.cap_s, unknown.run_s, unknown.compile_s) == (90, RUN_GRACE_S, COMPILE_LIMIT_S)
    assert timed_deadline(PERF, 20.0).run_s == RUN_GRACE_S + SLOWDOWN_ALLOWED * 0.020


def test_the_first_timing_spins_the_clocks_up_and_the_rest_follow(tmp_path: Path) -> None:
    assignment = load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")
    contestants = Contestants(assignment, "cpu", tmp_path, lambda perf: timed_deadline(perf, None))
    assert contestants.spin_up_ms() == performance_timing.DEFAULT_SPIN_UP_MS
    assert contestants.spin_up_ms() == contestants.spin_up_ms() == performance_timing.FOLLOW_UP_SPIN_UP_MS
    assert contestants.timer is None and contestants.timer_problem  # started by the runner, not here
    assert contestants.reference_problem == ""  # the course has a reference solution to time
