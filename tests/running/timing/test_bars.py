"""grader/running/timing/bars.py on the CPU: the bars a grade compares its timed cases with, kept per GPU and versions
(not per seed), measured once and read by later grades; the deadline a timed request gets from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.authoring.oracle_loader import load_problems
from grader.authoring.spec import Assignment, PerformanceCase
from grader.running.timing import bars as bars_module
from grader.running.timing import runner as timing_runner
from grader.running.timing.calibration import Calibration, CalibrationKey, CalibrationStore
from grader.running.timing.calls import Prepared
from tests.running.timing.test_calibration import H200


def test_the_seed_is_not_in_the_key(assignment: Assignment, perf: PerformanceCase, key: CalibrationKey,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Every grade of a course shares the bars: two runners on different seeds ask for the same key."""
    monkeypatch.setattr(bars_module, "this_machine", lambda device: H200)
    runners = [timing_runner.PerformanceRunner(assignment, seed, device="cpu") for seed in (1, 2)]
    try:
        assert runners[0]._calibration_key(perf) == runners[1]._calibration_key(perf) == key
    finally:
        for runner in runners:
            runner.close()


def test_runners_on_other_seeds_reuse_the_bars(tmp_path: Path, assignment: Assignment, perf: PerformanceCase,
                                               key: CalibrationKey, monkeypatch: pytest.MonkeyPatch) -> None:
    """PerformanceRunner._bars through the store: the first grade measures (torch eager, reference), a later
    one (another seed, another store object: another run) reads them; bars without the reference's
    time are used but not stored (the reference's failure may have been passing)."""
    monkeypatch.setattr(bars_module, "this_machine", lambda device: H200)
    spec = assignment.kernels.get(perf.target) or assignment.functions[perf.target]
    problem = load_problems(assignment)[spec.problem]
    prepared = Prepared(perf, problem, None, {}, None)  # only what _bars reads
    timed: list[int] = []
    made: list[timing_runner.PerformanceRunner] = []

    def bars(seed: int, reference: list[float] | None, cached: bool = True) -> Calibration | str:
        runner = timing_runner.PerformanceRunner(assignment, seed, device="cpu",
                                               calibration=CalibrationStore(tmp_path) if cached else None)
        made.append(runner)
        runner._copy_gb_per_s = 4000.0
        monkeypatch.setattr(runner, "_time_eager", lambda *_: timed.append(seed) or [0.2] * perf.repeats)
        monkeypatch.setattr(runner.contestants, "time_reference",
                            lambda _: (reference, "" if reference else "it crashed"))
        return runner._bars(prepared, None)

    try:
        partial = bars(1, None)
        assert isinstance(partial, Calibration) and partial.reference is None and partial.reference_note
        first = bars(1, [0.12] * perf.repeats)
        later = bars(2, [9.9] * perf.repeats)
        assert timed == [1, 1] and later == first and isinstance(first, Calibration)
        assert first.reference == (0.12,) * perf.repeats and first.id.startswith(f"{key.digest}@")
        alone = bars(4, [0.5] * perf.repeats, cached=False)  # no store: measured for this grade alone
        assert isinstance(alone, Calibration) and alone.reference == (0.5,) * perf.repeats and timed[-1] == 4
    finally:
        for runner in made:
            runner.close()


def test_a_timed_request_gets_its_deadline_from_the_kept_bars(tmp_path: Path, assignment: Assignment,
                                                              perf: PerformanceCase,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Before any bar is kept, a timed request gets the case's cap with a run window of the grace alone; once the
    reference's time is kept, the window allows the reference's time many times over."""
    monkeypatch.setattr(bars_module, "this_machine", lambda device: H200)
    runner = timing_runner.PerformanceRunner(assignment, 1, device="cpu", calibration=CalibrationStore(tmp_path))
    try:
        before = runner._deadline(perf)
        runner._copy_gb_per_s = 4000.0
        monkeypatch.setattr(runner, "_time_eager", lambda *_: [0.2] * perf.repeats)
        monkeypatch.setattr(runner.contestants, "time_reference", lambda _: ([50.0] * perf.repeats, ""))
        spec = assignment.kernels.get(perf.target) or assignment.functions[perf.target]
        assert isinstance(runner._bars(Prepared(perf, load_problems(assignment)[spec.problem], None, {}, None)),
                          Calibration)
        after = runner._deadline(perf)
    finally:
        runner.close()
    assert before.cap_s == after.cap_s == perf.timeout_s
    assert before.run_s is not None and after.run_s is not None and after.run_s > before.run_s
