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


def test_a_trace_file_gets_each_phase_as_it_ends_with_the_shared_clock(tmp_path) -> None:
    import json
    import os
    import time

    trace = tmp_path / "trace.jsonl"
    clock = PhaseClock(trace=str(trace))
    before = time.monotonic()
    with clock.phase("correctness"):
        with clock.phase("start-up"):
            pass
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [line["phase"] for line in lines] == ["start-up", "correctness"]  # inner ends first
    inner, outer = lines
    assert before <= outer["start"] <= inner["start"] <= inner["end"] <= outer["end"] <= time.monotonic()
    assert inner["pid"] == outer["pid"] == os.getpid()


def test_an_unwritable_trace_is_dropped_never_the_grade(tmp_path) -> None:
    clock = PhaseClock(trace=str(tmp_path / "missing-folder" / "trace.jsonl"))
    with clock.phase("correctness"):
        pass
    with clock.phase("replay"):
        pass
    assert set(clock.seconds) == {"correctness", "replay"}
    assert not (tmp_path / "missing-folder").exists()


def test_without_the_variable_nothing_is_traced(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("GRADER_PHASE_TRACE", raising=False)
    monkeypatch.chdir(tmp_path)
    with PhaseClock().phase("correctness"):
        pass
    assert list(tmp_path.iterdir()) == []
