"""The phase clock: each second counts once, in the innermost open phase; grade.json carries phases."""

from __future__ import annotations

import json
import time

from grader.running.phases import PhaseClock


def test_nested_phases_count_each_second_once() -> None:
    clock = PhaseClock()
    with clock.phase("correctness"):
        time.sleep(0.05)
        with clock.phase("start-up"):
            time.sleep(0.1)
        with clock.phase("replay"):
            time.sleep(0.05)
    assert 0.1 <= clock.seconds["start-up"] < 0.2
    assert 0.05 <= clock.seconds["replay"] < 0.1
    assert 0.05 <= clock.seconds["correctness"] < 0.1  # the nested 0.15 s are not counted twice
    with clock.phase("correctness"):
        time.sleep(0.05)
    assert 0.1 <= clock.seconds["correctness"] < 0.2  # phases add up over a grade


def test_grade_json_records_the_phases(reference_graded) -> None:
    grade = json.loads((reference_graded.out_dir / "grade.json").read_text(encoding="utf-8"))
    phases = grade["phases"]
    assert {"start-up", "correctness", "compile"} <= set(phases)
    assert all(seconds >= 0 for seconds in phases.values())
    assert phases["start-up"] > 0 and phases["correctness"] > 0


def test_a_worker_failure_passes_through_a_phase() -> None:
    """Python 3.12's contextlib sets __traceback__ on an exception leaving a @contextmanager block."""
    import contextlib

    import pytest

    from grader.running.processes.client import WorkerFailure

    @contextlib.contextmanager
    def sets_traceback():
        try:
            yield
        except BaseException as exc:
            exc.__traceback__ = exc.__traceback__  # what 3.12's _GeneratorContextManager.__exit__ does
            raise

    clock = PhaseClock()
    with pytest.raises(WorkerFailure) as caught, clock.phase("start-up"), sets_traceback():
        raise WorkerFailure("crash", "the worker exited with status 3")
    assert (caught.value.trap, str(caught.value)) == ("crash", "the worker exited with status 3")
    assert "start-up" in clock.seconds
